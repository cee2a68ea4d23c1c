"""A provider price table: what a provider charges per million tokens for a model, as the user
writes it down (nothing is fetched). ``summarize`` and the report turn token counts into dollars
with it, beside the idealized dollars of the hardware model.

File: YAML (a list, or a mapping with a ``prices`` list) or CSV with a header, one entry per
(provider, model):

    provider, model                 who serves it and the name its API takes (required)
    input_usd_per_mtok              dollars per 1M prompt tokens (required)
    output_usd_per_mtok             dollars per 1M output tokens, reasoning included (required)
    cached_input_usd_per_mtok       dollars per 1M prompt tokens served from the provider's
                                    prefix cache (optional; default: the input price)
    architecture                    the catalog architecture it runs (optional; gives the
                                    idealized dollars of the same requests)

A request's dollars: (uncached prompt x input + cached prompt x cached input + output x output
price) / 1e6. Rows name their model by ``--label`` (or ``--model``): an entry matches a row whose
model is its ``model`` or ``provider/model``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import read_text_file

TOKENS_PER_PRICE_UNIT = 1_000_000
PRICE_COLUMNS = ("input_usd_per_mtok", "output_usd_per_mtok")
OPTIONAL_PRICE_COLUMNS = ("cached_input_usd_per_mtok",)
MAX_PRICE_USD = 1e6  # per 1M tokens: more is a typo (a price per token written per million)


@dataclass(frozen=True)
class ProviderPrice:
    provider: str
    model: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None
    architecture: str | None = None

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.model}"

    def usd(self, prompt_tokens: float, output_tokens: float, cached_tokens: float = 0.0) -> float:
        """Dollars of one request: cached prompt tokens at the cached price (else the input
        price), the rest of the prompt at the input price, the output at the output price."""
        cached = min(max(cached_tokens, 0.0), prompt_tokens)
        cached_price = self.cached_input_usd_per_mtok
        if cached_price is None:
            cached_price = self.input_usd_per_mtok
        return (
            (prompt_tokens - cached) * self.input_usd_per_mtok
            + cached * cached_price
            + output_tokens * self.output_usd_per_mtok
        ) / TOKENS_PER_PRICE_UNIT


@dataclass(frozen=True)
class PriceTable:
    prices: tuple[ProviderPrice, ...]
    source: str = ""

    def for_model(self, model: str) -> ProviderPrice | None:
        """The entry of a rows' model name (``provider/model`` or a model name only one entry
        has); None when none matches. Two providers of one bare name is an InputError."""
        exact = [price for price in self.prices if price.name == model]
        if exact:
            return exact[0]
        named = [price for price in self.prices if price.model == model]
        if len(named) > 1:
            providers = ", ".join(price.provider for price in named)
            raise InputError(
                f"{len(named)} prices for model {model!r} ({providers}): label the rows "
                "provider/model (measure --label)",
                path=self.source or None,
            )
        return named[0] if named else None

    def for_architecture(self, architecture: str) -> list[ProviderPrice]:
        return [price for price in self.prices if price.architecture == architecture]


def read_price_table(path: str | Path) -> PriceTable:
    """The price table in ``path`` (YAML or CSV, see the module docstring); InputError naming
    the file and entry for anything malformed."""
    path = Path(path)
    text = read_text_file(path, "price table")
    if path.suffix.lower() == ".csv":
        try:
            records: list[Any] = list(csv.DictReader(text.splitlines()))
        except csv.Error as error:
            raise InputError(f"malformed CSV ({error})", path=str(path)) from None
    else:
        records = _yaml_records(text, str(path))
    if not records:
        raise InputError("the price table has no entries", path=str(path))
    prices = tuple(_price(record, str(path), row) for row, record in enumerate(records, 1))
    seen: set[str] = set()
    for row, price in enumerate(prices, 1):
        if price.name in seen:
            raise InputError(f"{price.name} is listed twice", path=str(path), row=row)
        seen.add(price.name)
    return PriceTable(prices, source=str(path))


def _yaml_records(text: str, path: str) -> list[Any]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(f"not valid YAML ({str(error).splitlines()[0]})", path=path) from None
    if isinstance(data, Mapping):
        data = data.get("prices")
    if not isinstance(data, list):
        raise InputError("expected a list of prices (or a mapping with a 'prices' list)", path=path)
    return data


def _price(record: Any, path: str, row: int) -> ProviderPrice:
    if not isinstance(record, Mapping):
        raise InputError("an entry must be a mapping of columns", path=path, row=row)
    record = {str(key).strip(): value for key, value in record.items() if key is not None}
    text: dict[str, str | None] = {}
    for column in ("provider", "model", "architecture"):
        value = record.get(column)
        value = "" if value is None else str(value).strip()
        if column != "architecture" and not value:
            raise InputError(f"missing {column}", path=path, row=row)
        text[column] = value or None
    numbers = {
        column: _usd(record.get(column), column, path, row)
        for column in (*PRICE_COLUMNS, *OPTIONAL_PRICE_COLUMNS)
        if column in PRICE_COLUMNS or record.get(column) not in (None, "")
    }
    return ProviderPrice(
        provider=str(text["provider"]),
        model=str(text["model"]),
        architecture=text["architecture"],
        **numbers,  # type: ignore[arg-type]
    )


def _usd(value: Any, column: str, path: str, row: int) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0 <= number <= MAX_PRICE_USD):
        shown = "nothing" if value in (None, "") else repr(value)
        raise InputError(
            f"must be dollars per 1M tokens, from 0 to {MAX_PRICE_USD:g}, got {shown}",
            path=path,
            row=row,
            column=column,
        )
    return number


def request_usd(
    price: ProviderPrice, rows: Iterable[Mapping[str, Any]]
) -> tuple[list[float], float, float]:
    """Each row's dollars, and the prompt and output tokens they add up to (rows as ``measure``
    writes them: ``num_prompt_tokens``, ``num_output_tokens``, ``cached_prompt_tokens``)."""
    dollars: list[float] = []
    prompt_total = output_total = 0.0
    for row in rows:
        prompt = _count(row.get("num_prompt_tokens"))
        output = _count(row.get("num_output_tokens"))
        dollars.append(price.usd(prompt, output, _count(row.get("cached_prompt_tokens"))))
        prompt_total += prompt
        output_total += output
    return dollars, prompt_total, output_total


def _count(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0
