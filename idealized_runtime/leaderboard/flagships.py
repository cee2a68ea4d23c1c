"""Today's models the board shows by default: the catalog's flagship configs
(data/architectures.yaml, from their published config.json). Apart so that the board and the
figures it ships (``best_deployments``) both read them without importing each other."""

from __future__ import annotations

FLAGSHIP_MODELS = (
    "llama-3.3-70b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-235b-a22b",
    "gemma-3-27b",
    "deepseek-v3",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "mistral-small-24b",
    "phi-4",
)
FLAGSHIP = "flagship"  # the name of FLAGSHIP_MODELS on the command line
