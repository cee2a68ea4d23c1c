"""Hypothesis profiles: the suite is deterministic by default, exploration is opt-in.

``default`` derandomizes every property test (the same examples on every run and machine), so
a test that passes on a commit passes on every run of that commit. ``explore`` draws fresh
random examples, five times as many, to look for new counterexamples:

    python -m pytest --hypothesis-profile=explore tests/cost_model

Tests that set ``derandomize`` themselves (the schemathesis run with a printed random seed)
keep their own setting.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None)
settings.register_profile("explore", max_examples=500, derandomize=False)
settings.load_profile("default")
