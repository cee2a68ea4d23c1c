"""The black-box timing client of OpenAI-compatible APIs: client, prompts, load patterns, grids."""
