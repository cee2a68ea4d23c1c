"""Published measurements of real inference engines (``data/published/``).

Each row is one figure exactly as an engine's README, documentation, benchmark page or MLPerf
result published it, with the source it came from. Reference stacks are calibrated on these rows
and the hardware model's errors are measured against them.

pandas is imported inside :func:`published_frame` only, so that loading the rows stays light.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from idealized_runtime.core.catalog import data_path
from idealized_runtime.core.errors import InputError

if TYPE_CHECKING:
    import pandas

PUBLISHED_DIR = "published"
MEASUREMENTS_FILE = "measurements.csv"
SOURCES_FILE = "sources.csv"

Metric = Literal[
    "decode_tokens_per_s",  # tokens/s of one sequence (batch-1, latency-style)
    "ttft_s",  # time to first token, seconds
    "time_per_output_token_s",  # seconds between output tokens of one sequence
    # seconds between two streamed chunks of a sequence, over every gap of every request (a
    # chunk a token when streamed token by token): the median is the decode step between
    # prompts, where TPOT averages the steps prompts interrupt in
    "inter_token_latency_s",
    "request_latency_s",  # seconds from request to last token
    "output_throughput_tokens_per_s",  # generated tokens/s summed over all sequences
    "output_throughput_tokens_per_s_per_gpu",  # the same divided by the GPUs used, as some publish
    "total_throughput_tokens_per_s",  # (prompt + generated) tokens/s over all sequences
    "total_throughput_tokens_per_s_per_gpu",  # the same divided by the GPUs used
    "prefill_tokens_per_s",  # prompt tokens/s processed
]
METRICS: tuple[str, ...] = Metric.__args__  # type: ignore[attr-defined]
# Unit of each metric, for tables and plots.
METRIC_UNITS: dict[str, str] = {
    "decode_tokens_per_s": "tokens/s per sequence",
    "ttft_s": "s",
    "time_per_output_token_s": "s",
    "inter_token_latency_s": "s",
    "request_latency_s": "s",
    "output_throughput_tokens_per_s": "tokens/s",
    "output_throughput_tokens_per_s_per_gpu": "tokens/s per GPU",
    "total_throughput_tokens_per_s": "tokens/s",
    "total_throughput_tokens_per_s_per_gpu": "tokens/s per GPU",
    "prefill_tokens_per_s": "tokens/s",
}

# Weight formats: a base number format, optionally with a quantization group size (int4-g128).
_WEIGHTS = re.compile(
    r"^(fp32|bf16|fp16|fp8|fp8-block|fp6|int8|int4|fp4|nvfp4|mxfp4|mxfp8)(-g\d+)?$"
)
# Which value of a distribution a serving-at-load figure is (empty: the figure itself).
Statistic = Literal["mean", "median", "p90", "p99"]
CacheDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
ActivationDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4", "nvfp4", "mxfp8"]
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _lower_case_id(value: str, info: ValidationInfo) -> str:
    if not _ID.match(value):
        raise ValueError(f"{info.field_name} {value!r} must be lower-case letters, digits, . _ -")
    return value


# Ids name rows across the CSV files (and a row's source): one spelling, checked alike.
LowerCaseId = Annotated[str, AfterValidator(_lower_case_id)]

# Bytes per weight of each base format, used to compare precisions of the same model.
WEIGHT_BITS: dict[str, float] = {
    "fp32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "mxfp8": 8,
    "int8": 8,
    "fp6": 6,
    "int4": 4,
    "fp4": 4,
    "nvfp4": 4,
    "mxfp4": 4,
}

OptionalInt = Annotated[int | None, Field(default=None, ge=1)]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # CSV cells are strings; an empty cell means "not stated".
        return None if value == "" else value


class PublishedSource(_Row):
    """Where figures come from: a page (url) or a file in a repository at a commit."""

    source_id: LowerCaseId
    title: str
    url: str | None = None
    repository: str | None = None
    commit: str | None = None
    path: str | None = None
    source_date: str
    retrieved: str
    notes: str | None = None

    @field_validator("source_date", "retrieved")
    @classmethod
    def _check_date(cls, value: str) -> str:
        if not _DATE.match(value):
            raise ValueError(f"date {value!r} must be YYYY-MM or YYYY-MM-DD")
        return value


class PublishedRow(_Row):
    """One published figure: the engine, hardware, model, precision and workload it was measured
    with, and the value in the unit of its ``metric``. Fields the source does not state are None
    (empty in the CSV), and ``notes`` says so."""

    row_id: LowerCaseId
    source_id: str
    engine: str
    engine_version: str | None = None
    cuda_graphs_or_compiled: bool | None = None
    gpu: str
    gpu_count: int = Field(ge=1)
    power_cap_w: float | None = Field(default=None, gt=0)
    model: str
    model_hf_id: str | None = None
    weights: str
    kv_cache: CacheDtype | None = None
    activations: ActivationDtype | None = None
    quantization_method: str | None = None
    tensor_parallel_size: int = Field(ge=1)
    pipeline_parallel_size: OptionalInt = None
    batch_size: OptionalInt = None
    num_requests: OptionalInt = None
    prompt_tokens: OptionalInt = None
    output_tokens: OptionalInt = None
    metric: Metric
    value: float = Field(gt=0, allow_inf_nan=False)
    notes: str | None = None
    # Serving at load: closed-loop clients, the statistic a latency figure is, and how the
    # engine spread the model (expert-parallel size, attention data parallel, speculative
    # decoding such as "mtp").
    concurrency: OptionalInt = None
    statistic: Statistic | None = None
    expert_parallel_size: OptionalInt = None
    attention_dp: bool | None = None
    speculative: str | None = None

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: str) -> str:
        if not _WEIGHTS.match(value):
            raise ValueError(
                f"weights {value!r} is not a known format (bf16, fp16, fp8, int8, int4, "
                "int4-g128, nvfp4, ...)"
            )
        return value

    @property
    def weight_format(self) -> str:
        """The base number format of the weights, without a group size: int4-g128 -> int4."""
        return self.weights.split("-g")[0]

    @property
    def weight_bits(self) -> float:
        return WEIGHT_BITS[self.weight_format]

    @property
    def unit(self) -> str:
        return METRIC_UNITS[self.metric]

    def system_figure(self) -> tuple[str, float]:
        """(metric, value) for the whole system: a per-GPU throughput times ``gpu_count``; every
        other metric unchanged."""
        if self.metric.endswith("_per_gpu"):
            return self.metric.removesuffix("_per_gpu"), self.value * self.gpu_count
        return self.metric, self.value


def _read_csv(name: str) -> list[dict[str, str]]:
    return read_published_table(data_path(PUBLISHED_DIR, name))[1]


def read_published_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV table of ``data/published/``: its columns and its rows, cells as written."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def write_published_table(
    path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, object]]
) -> None:
    """Write a CSV table of ``data/published/`` as the shipped ones are (a header, "\\n" line
    ends), for the scripts that collect published figures (``benchmarks/collect_*.py``)."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def replace_source_rows(
    rows: Sequence[dict[str, str]], new: Sequence[dict[str, str]], sources: Iterable[str]
) -> list[dict[str, str]]:
    """``rows`` of a published table with those of ``sources`` (source ids, or their prefixes)
    replaced by ``new``, where the first of them stood (else at the end): a collector rewrites
    its own sources' rows and leaves every other row where it is."""
    prefixes = tuple(sources)
    kept = [row for row in rows if not row["source_id"].startswith(prefixes)]
    first = next((i for i, row in enumerate(rows) if row["source_id"].startswith(prefixes)), None)
    if first is None:
        return [*kept, *new]
    return [*kept[:first], *new, *kept[first:]]  # no row before the first is one of theirs


def _validated(model: type[_Row], record: dict[str, str], name: str, line: int) -> _Row:
    # csv.DictReader files surplus cells under None and fills missing ones with None.
    if None in record or None in record.values():
        message = "wrong number of cells (an unquoted comma?)"
        raise InputError(message, path=name, row=line)
    try:
        return model(**record)
    except ValidationError as error:
        first = error.errors()[0]
        column = ".".join(str(part) for part in first["loc"]) or None
        raise InputError(first["msg"], path=name, row=line, column=column) from None


@lru_cache(maxsize=1)
def published_sources() -> dict[str, PublishedSource]:
    """The sources of the table, by source_id."""
    sources: dict[str, PublishedSource] = {}
    for line, record in enumerate(_read_csv(SOURCES_FILE), start=2):
        source = _validated(PublishedSource, record, SOURCES_FILE, line)
        assert isinstance(source, PublishedSource)
        if source.source_id in sources:
            message = f"duplicate source_id {source.source_id!r}"
            raise InputError(message, path=SOURCES_FILE, row=line)
        sources[source.source_id] = source
    return sources


@lru_cache(maxsize=1)
def _published_rows() -> tuple[PublishedRow, ...]:
    sources = published_sources()
    rows: list[PublishedRow] = []
    seen: set[str] = set()
    for line, record in enumerate(_read_csv(MEASUREMENTS_FILE), start=2):
        row = _validated(PublishedRow, record, MEASUREMENTS_FILE, line)
        assert isinstance(row, PublishedRow)
        if row.row_id in seen:
            raise InputError(f"duplicate row_id {row.row_id!r}", path=MEASUREMENTS_FILE, row=line)
        if row.source_id not in sources:
            raise InputError(
                f"source_id {row.source_id!r} is not in {SOURCES_FILE}",
                path=MEASUREMENTS_FILE,
                row=line,
                column="source_id",
            )
        seen.add(row.row_id)
        rows.append(row)
    return tuple(rows)


def load_published() -> list[PublishedRow]:
    """Every published figure shipped with the package, validated."""
    return list(_published_rows())


def published_frame() -> pandas.DataFrame:
    """The table as a DataFrame, one row per figure, with the source's title, url and date
    joined in (columns ``source_title``, ``source_url``, ``source_date``)."""
    import pandas

    sources = published_sources()
    records = []
    for row in _published_rows():
        source = sources[row.source_id]
        record = row.model_dump()
        record["source_title"] = source.title
        record["source_url"] = source.url
        record["source_date"] = source.source_date
        records.append(record)
    frame = pandas.DataFrame.from_records(records, columns=_frame_columns())
    for column in (
        "gpu_count",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "batch_size",
        "num_requests",
        "prompt_tokens",
        "output_tokens",
        "concurrency",
        "expert_parallel_size",
    ):
        frame[column] = frame[column].astype("Int64")
    frame["cuda_graphs_or_compiled"] = frame["cuda_graphs_or_compiled"].astype("boolean")
    frame["attention_dp"] = frame["attention_dp"].astype("boolean")
    return frame


def _frame_columns() -> list[str]:
    return [*PublishedRow.model_fields, "source_title", "source_url", "source_date"]
