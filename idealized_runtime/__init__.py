"""idealized-runtime: how efficient an LLM really is at inference, independent of who serves it."""

__version__ = "0.1.0"
