"""Published disaggregated (xPyD) serving measurements (``data/published/disaggregated.csv``).

One row per measured deployment and load, exactly as published, with its source on the row:
the layout of both pools (workers, tensor-parallel, expert-parallel and attention data-parallel
sizes, GPUs), the workload and concurrency, median TTFT and TPOT, and output tokens/s per decode
GPU (the unit the source publishes). ``measurements.csv`` has no columns for a second pool, so
these rows live beside it. ``benchmarks/collect_inferencex_disaggregated.py`` writes the file.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from idealized_runtime.core.catalog import data_path
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import read_published_table

DISAGGREGATED_FILE = "disaggregated.csv"
Positive = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class DisaggregatedPoint(BaseModel):
    """One published disaggregated serving point (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    row_id: str
    source_id: str
    source_title: str
    source_url: str
    repository: str
    commit: Annotated[str, Field(min_length=40, max_length=40)]
    path: str
    source_date: str
    retrieved: str
    engine: str
    engine_version: str
    gpu: str
    model: str
    model_hf_id: str
    weights: str
    speculative: str
    prompt_tokens: Positive
    output_tokens: Positive
    concurrency: Positive
    prefill_workers: Positive
    prefill_tp: Positive
    prefill_ep: Positive
    prefill_attention_dp: bool
    prefill_gpus: Positive
    decode_workers: Positive
    decode_tp: Positive
    decode_ep: Positive
    decode_attention_dp: bool
    decode_gpus: Positive
    ttft_s_median: Seconds
    tpot_s_median: Seconds
    output_tokens_per_s_per_decode_gpu: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    notes: str = ""

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        """Output tokens/s over all the deployment's GPUs, both pools."""
        decode = self.output_tokens_per_s_per_decode_gpu * self.decode_gpus
        return decode / (self.prefill_gpus + self.decode_gpus)


COLUMNS: tuple[str, ...] = tuple(DisaggregatedPoint.model_fields)


@lru_cache(maxsize=1)
def load_disaggregated() -> tuple[DisaggregatedPoint, ...]:
    """Every row of the file, validated; InputError naming the first bad row."""
    path = data_path("published", DISAGGREGATED_FILE)
    _, rows = read_published_table(path)
    points = []
    for number, row in enumerate(rows, start=2):
        try:
            points.append(DisaggregatedPoint.model_validate(row))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InputError(f"{path.name}, line {number}: {where}: {first['msg']}") from None
    return tuple(points)
