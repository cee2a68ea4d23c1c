"""The black-box timing client of OpenAI-compatible APIs (``measure``), its summaries and the
importers of other tools' timings; docs/timing_client.md maps its modules."""
