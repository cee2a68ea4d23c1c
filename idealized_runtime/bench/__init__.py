"""Batch benchmarks: a YAML file lists models (architectures for the local runner, or
OpenAI-compatible endpoints), hardware, grids and repeats; ``run_bench`` profiles or measures
each and fits the timings, through the same library functions as the ``profile``, ``measure``
and ``fit`` commands.

Results folder (one per benchmark run; rerunning into it resumes)::

    manifest.json                   versions, hardware, command lines, timestamps, item status
    items/<kind>-<name>/measurements.csv (+ .meta.json)   local profile      (kind = local)
    items/<kind>-<name>/timings.jsonl                      raw API timings    (kind = api)
    items/<kind>-<name>/fits-<method>.json                 one fit file per method
    estimates.json                  the hardware model's estimates of the ``estimates`` list

An item is ``done`` once its fit files are written; a rerun skips done items and lets the
profiler / timing client resume the others from the rows already on disk. A failed item does
not stop the others; the run then ends with one error line and a non-zero exit.

Modules: ``config`` (the benchmark file), ``manifest`` (``manifest.json``), ``run`` (running it).
"""
