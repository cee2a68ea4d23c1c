"""The monitoring file: endpoints (a provider's OpenAI-compatible API, the model, where the key
is, its prices and the idealized reference), the probe workload and the schedule, validated
before anything is sent (``load_config``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from idealized_runtime.core.config_files import BaseUrl, load_yaml_config
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.prices import MAX_PRICE_USD, ProviderPrice
from idealized_runtime.core.rounds import PROVIDER_PATTERN, ProbeShape
from idealized_runtime.trends.changes import ChangeSettings

DEFAULT_SHAPES = ((128, 16), (512, 16), (128, 64))
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
Usd = Annotated[float, Field(ge=0, le=MAX_PRICE_USD, allow_inf_nan=False)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PriceSpec(_Spec):
    """Dollars per 1M tokens."""

    input_usd_per_mtok: Usd
    output_usd_per_mtok: Usd
    cached_input_usd_per_mtok: Usd | None = None


class ReferenceSpec(_Spec):
    """The idealized runtime of the probe's shapes: the hardware model for a catalog
    architecture on a GPU and stack (batch 1, the checkpoint's precision), or a fit file."""

    architecture: str | None = Field(default=None, description="catalog name or config.json")
    hardware: str = "h100-sxm"
    stack: str | None = Field(default=None, description="reference stack (default: the estimate's)")
    fit: Path | None = Field(default=None, description="a fit file (idealized fit of this model)")
    fit_model: str | None = Field(default=None, description="its model, if it holds several")

    @model_validator(mode="after")
    def _one_source(self) -> ReferenceSpec:
        if (self.architecture is None) == (self.fit is None):
            raise ValueError("give either architecture (hardware model) or fit (a fit file)")
        return self


class EndpointSpec(_Spec):
    """One provider's model, probed each round."""

    provider: Annotated[str, Field(min_length=1, max_length=100, pattern=PROVIDER_PATTERN)]
    base_url: BaseUrl
    model: str = Field(min_length=1, max_length=200, description="model name the API expects")
    label: str | None = Field(
        default=None, max_length=200, description="the model's name in the series (default: model)"
    )
    api_key_env: Annotated[str, Field(pattern=ENV_NAME_PATTERN)] | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    tokenizer: str | None = Field(
        default=None, description="tokenizer.json, tiktoken:ENCODING or bytes; default: calibrate"
    )
    extra_body: dict[str, Any] = Field(default_factory=dict)
    prices: PriceSpec | None = None
    reference: ReferenceSpec | None = None

    @property
    def name(self) -> str:
        """The model's name in the series."""
        return self.label or self.model

    @property
    def slug(self) -> str:
        """A file-name- and id-safe name of the endpoint: provider, model and a hash of the
        model's name (two names that differ only in other characters stay apart)."""
        readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)[:48]
        digest = hashlib.sha256(self.name.encode()).hexdigest()[:8]
        return f"{self.provider}--{readable}-{digest}"

    def price(self) -> ProviderPrice | None:
        if self.prices is None:
            return None
        return ProviderPrice(
            provider=self.provider,
            model=self.name,
            input_usd_per_mtok=self.prices.input_usd_per_mtok,
            output_usd_per_mtok=self.prices.output_usd_per_mtok,
            cached_input_usd_per_mtok=self.prices.cached_input_usd_per_mtok,
        )


class ProbeSpec(_Spec):
    """The requests of one round, the same for every endpoint: each shape ``repeats`` times."""

    shapes: list[ProbeShape] = Field(
        default_factory=lambda: [
            ProbeShape(prompt_tokens=p, output_tokens=o) for p, o in DEFAULT_SHAPES
        ],
        min_length=1,
        max_length=100,
    )
    repeats: int = Field(default=2, ge=1, le=100)
    concurrency: int = Field(default=1, ge=1, le=256)
    stream: bool = True
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    max_retries: int = Field(default=3, ge=0, le=100)
    backoff_base_s: float = Field(default=0.5, ge=0, le=600)
    backoff_max_s: float = Field(default=30.0, ge=0, le=3600)
    # An endpoint that is down would otherwise cost every request's full backoff every round.
    retry_budget_s: float = Field(
        default=3.0, ge=0, le=3600, description="waits between retries per endpoint and round"
    )

    @field_validator("shapes", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        """Shapes as [prompt, output] pairs or objects with prompt_tokens, output_tokens."""
        if isinstance(value, list):
            return [
                {"prompt_tokens": item[0], "output_tokens": item[1]}
                if isinstance(item, (list, tuple)) and len(item) == 2
                else item
                for item in value
            ]
        return value


class ChangesSpec(_Spec):
    """The monitor's change detection (``trends.changes``): rounds of a level before its
    shifts can be flagged, and how many recent rounds make the baseline."""

    min_baseline_rounds: int = Field(default=20, ge=3, le=10_000)
    baseline_rounds: int = Field(default=40, ge=3, le=10_000)

    @model_validator(mode="after")
    def _ordered(self) -> ChangesSpec:
        if self.baseline_rounds < self.min_baseline_rounds:
            raise ValueError("baseline_rounds must be at least min_baseline_rounds")
        return self

    def settings(self) -> ChangeSettings:
        return ChangeSettings(
            baseline_rounds=self.baseline_rounds, min_baseline_rounds=self.min_baseline_rounds
        )


class FlagHookSpec(_Spec):
    """What to call when the monitor flags a shift: a command (the flag as JSON on its standard
    input) and/or a webhook (the flag as a JSON POST)."""

    command: list[str] | None = Field(default=None, min_length=1, description="argv, no shell")
    webhook: BaseUrl | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=600)

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, value: Any) -> Any:
        """A command as one string is split as a shell would split it (without running one)."""
        if isinstance(value, str):
            import shlex

            return shlex.split(value)
        return value


class ServiceSpec(_Spec):
    url: str = Field(min_length=1, description="the service's root, e.g. http://127.0.0.1:8000")
    api_key_env: Annotated[str, Field(pattern=ENV_NAME_PATTERN)] = "IDEALIZED_RUNTIME_API_KEY"


class MonitorConfig(_Spec):
    name: str | None = None
    interval_s: float = Field(default=300.0, ge=0, le=7 * 86400, description="between rounds")
    jitter_s: float = Field(default=0.0, ge=0, le=86400, description="added, uniform, seeded")
    seed: int = Field(default=0, ge=0)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    changes: ChangesSpec = Field(default_factory=ChangesSpec)
    on_flag: FlagHookSpec | None = Field(default=None, description="called for each new flag")
    endpoints: list[EndpointSpec] = Field(min_length=1, max_length=1000)
    service: ServiceSpec | None = Field(default=None, description="store rounds here (--to)")
    database: str | None = Field(default=None, description="or in this database (--database)")

    @model_validator(mode="after")
    def _distinct_endpoints(self) -> MonitorConfig:
        seen: set[tuple[str, str]] = set()
        for endpoint in self.endpoints:
            key = (endpoint.provider, endpoint.name)
            if key in seen:
                raise ValueError(f"two endpoints of provider {key[0]!r} name model {key[1]!r}")
            seen.add(key)
        if self.service is not None and self.database is not None:
            raise ValueError("give service or database, not both")
        return self


def load_config(path: str | Path) -> MonitorConfig:
    """Read and validate a monitoring file; any problem is one InputError line. The keys'
    environment variables are checked here, before any request."""
    path = Path(path)
    config = load_yaml_config(
        path,
        MonitorConfig,
        what="monitoring file",
        expected="expected a mapping with an 'endpoints' list",
    )
    _check_runnable(config, path)
    # A fit file is found beside the monitoring file.
    endpoints = [
        endpoint.model_copy(
            update={
                "reference": endpoint.reference.model_copy(
                    update={"fit": path.parent / endpoint.reference.fit}
                )
            }
        )
        if endpoint.reference is not None and endpoint.reference.fit is not None
        else endpoint
        for endpoint in config.endpoints
    ]
    return config.model_copy(update={"endpoints": endpoints})


def _check_runnable(config: MonitorConfig, path: Path) -> None:
    """What the schema cannot see but every round would fail on: a key's variable unset, a
    tokenizer that cannot be loaded."""
    import os

    from idealized_runtime.timing.prompts import load_tokenizer

    for index, endpoint in enumerate(config.endpoints):
        if endpoint.api_key_env is not None and not os.environ.get(endpoint.api_key_env):
            raise InputError(
                f"endpoints.{index}.api_key_env: the environment variable "
                f"{endpoint.api_key_env} is not set",
                path=str(path),
            )
        if endpoint.tokenizer is not None:
            try:
                load_tokenizer(endpoint.tokenizer)
            except InputError as error:
                raise InputError(f"endpoints.{index}.tokenizer: {error}", path=str(path)) from None
