"""HELM's method and HELM's two table forms, each checked against an independent few-line
version of HELM's own rule: the fit that made HELM's tables, the lookup of
``runtime_for_prompt_tokens`` tables (scaled by p / size) and the lookup of the older
``runtime_for_input_tokens`` tables (unscaled inside the grid)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LinearRegression

from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.convert import convert_requests
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.fit_files import read_fit_file
from idealized_runtime.cost_model.fitting.helm_format import export_helm_table, import_helm_table
from idealized_runtime.cost_model.fitting.methods import HELM_TABLE_DECIMALS, fit_measurements
from idealized_runtime.cost_model.fitting.request_logs import RequestTable

NEW_KEY, OLD_KEY = "runtime_for_prompt_tokens", "runtime_for_input_tokens"
BETA_KEY = "runtime_per_output_token"


# --- independent versions of HELM's rules --------------------------------------------------------


def helm_reference_fit(
    rows: list[Measurement], decimals: int | None
) -> tuple[dict[int, float], float]:
    """HELM's fitting code in a few lines, with scikit-learn's LinearRegression as HELM used it."""

    def rounded(value: float) -> float:
        return value if decimals is None else round(value, decimals)

    def line(points: list[tuple[float, float]]) -> tuple[float, float]:
        regression = LinearRegression().fit([[x] for x, _ in points], [y for _, y in points])
        return rounded(regression.coef_[0]), rounded(regression.intercept_)

    sizes = sorted({r.num_prompt_tokens for r in rows})
    alpha: dict[int, float] = {}
    for i, size in enumerate(sizes):
        slope, intercept = line([(r.num_output_tokens, r.runtime_s) for r in rows
                                 if r.num_prompt_tokens == size])  # fmt: skip
        alpha[size] = rounded(slope + intercept)
        if i > 0:
            alpha[size] = max(alpha[size], alpha[sizes[0]])
    beta, _ = line([(r.num_output_tokens - 1, r.runtime_s - alpha[r.num_prompt_tokens])
                    for r in rows])  # fmt: skip
    return alpha, beta


def helm_reference_runtime(entry: dict[str, Any], p: int, o: int) -> float:
    """HELM's lookup in a few lines: the smallest profiled size >= p (scaled by p / size in
    runtime_for_prompt_tokens tables, not in runtime_for_input_tokens ones); past the largest,
    the largest scaled by p / size; beta per output token after the first; plus overhead."""
    scaled = NEW_KEY in entry
    table = {int(size): value for size, value in entry[NEW_KEY if scaled else OLD_KEY].items()}
    alpha = None
    for size in sorted(table):
        if p <= size:
            alpha = table[size] * p / size if scaled else table[size]
            break
    if alpha is None:
        largest = max(table)
        alpha = table[largest] * p / largest
    runtime = alpha + (entry[BETA_KEY] * (o - 1) if o > 0 else 0.0)
    return runtime + entry.get("overhead", 0.0)


# --- strategies ----------------------------------------------------------------------------------


@st.composite
def helm_entries(draw: st.DrawFn) -> dict[str, Any]:
    """One model's entry of a HELM table, in either form (alphas need not grow with p)."""
    sizes = sorted(draw(st.sets(st.integers(1, 4096), min_size=1, max_size=12)))
    alphas = draw(st.lists(st.floats(0, 5), min_size=len(sizes), max_size=len(sizes)))
    entry: dict[str, Any] = {
        BETA_KEY: draw(st.floats(0, 0.2)),
        draw(st.sampled_from([NEW_KEY, OLD_KEY])): dict(zip(map(str, sizes), alphas, strict=True)),
    }
    if draw(st.booleans()):
        entry["overhead"] = draw(st.floats(0, 1))
    return entry


def profiled_sizes(entry: dict[str, Any]) -> list[int]:
    return sorted(int(size) for size in entry.get(NEW_KEY, entry.get(OLD_KEY)))


@st.composite
def prompt_tokens(draw: st.DrawFn, sizes: list[int]) -> int:
    """A prompt on a profiled size, between two, below the smallest or beyond the largest."""
    where = draw(st.sampled_from(["on", "between", "beyond"]))
    if where == "on":
        return draw(st.sampled_from(sizes))
    if where == "beyond":
        return draw(st.integers(sizes[-1] + 1, 10 * sizes[-1] + 10))
    return draw(st.integers(1, sizes[-1]))


output_tokens = st.one_of(st.just(0), st.just(1), st.integers(2, 10_000))


@st.composite
def requests_for(draw: st.DrawFn, entry: dict[str, Any]) -> list[tuple[int, int]]:
    sizes = profiled_sizes(entry)
    return draw(st.lists(st.tuples(prompt_tokens(sizes), output_tokens), min_size=1, max_size=20))


@st.composite
def helm_grids(draw: st.DrawFn) -> list[Measurement]:
    """A profiling grid with noisy timings: several output lengths per prompt size (o = 1 not
    always among them), or o = 1 only at some sizes."""
    sizes = sorted(draw(st.sets(st.integers(1, 2048), min_size=1, max_size=6)))
    rows = []
    for size in sizes:
        outputs = draw(st.one_of(st.just([1]), st.sets(st.integers(1, 64), min_size=2, max_size=5)))
        for o in sorted(outputs):
            runtime = draw(st.floats(0.01, 2.0)) + 0.05 * o
            rows.append(Measurement(model="m", num_prompt_tokens=size, num_output_tokens=o,
                                    runtime_s=runtime))  # fmt: skip
    return rows


# --- HELM's fit --------------------------------------------------------------------------------


def shipped_profiles() -> dict[str, dict[str, Any]]:
    """Profile of the A100 grid -> its entry in HELM's shipped idealized table."""
    table = catalog.helm_table("idealized")
    entries: dict[str, dict[str, Any]] = {}
    for helm_name, profile in catalog.helm_model_shapes().items():
        if helm_name in table:
            entries.setdefault(profile, table[helm_name])
    return entries


def test_helm_method_reproduces_helms_table_from_its_grid(a100_grid) -> None:
    entries = shipped_profiles()
    assert len(entries) == 9
    full = fit_measurements(a100_grid, "helm")
    rounded = fit_measurements(a100_grid, "helm", helm_decimals=HELM_TABLE_DECIMALS)
    for profile, entry in entries.items():
        shipped = {int(size): value for size, value in entry[NEW_KEY].items()}
        for fit in (full[profile], rounded[profile]):
            assert fit.prompt_sizes == sorted(shipped)
        fitted = dict(zip(full[profile].prompt_sizes, full[profile].prompt_runtimes_s, strict=True))
        assert max(abs(fitted[size] - value) for size, value in shipped.items()) < 1.5e-3
        assert abs(full[profile].beta_s - entry[BETA_KEY]) < 1.5e-3
        # Rounded as HELM rounds, every value is the shipped float itself.
        assert rounded[profile].prompt_runtimes_s == [shipped[s] for s in sorted(shipped)]
        assert rounded[profile].beta_s == entry[BETA_KEY]


@settings(max_examples=60, deadline=None)
@given(rows=helm_grids())
def test_helm_method_is_helms_fitting_code(rows) -> None:
    if len({r.num_output_tokens for r in rows}) < 2:
        with pytest.raises(InputError, match="beta cannot be fitted"):
            fit_measurements(rows, "helm")
        return
    fit = fit_measurements(rows, "helm")["m"]
    alpha, beta = helm_reference_fit(rows, decimals=None)
    assert fit.prompt_sizes == sorted(alpha)
    expected = [max(0.0, alpha[size]) for size in fit.prompt_sizes]
    assert fit.prompt_runtimes_s == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert fit.beta_s == pytest.approx(max(0.0, beta), rel=1e-9, abs=1e-12)
    assert fit.alpha_rule == "helm_scale_up"


def test_sizes_timed_at_one_output_length() -> None:
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=o, runtime_s=0.1 * p + o)
        for p, outputs in ((1, (1, 1, 1)), (2, (1, 5)), (3, (4,)))
        for o in outputs
    ]
    fit = fit_measurements(rows, "helm")["m"]
    # p = 1: o = 1 only, the mean of its timings; p = 3: one length above 1, left out.
    assert fit.prompt_sizes == [1, 2]
    assert fit.prompt_runtimes_s == pytest.approx([1.1, 1.2])
    only_long = [r.model_copy(update={"num_output_tokens": 7}) for r in rows]
    with pytest.raises(InputError, match="two output lengths"):
        fit_measurements(only_long, "helm")


# --- HELM's lookups, both table forms ----------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(data=st.data(), entry=helm_entries())
def test_lookup_of_either_table_form_is_helms(data, entry) -> None:
    fit = import_helm_table({"m": entry})["m"]
    assert fit.alpha_rule == ("helm_scale_up" if NEW_KEY in entry else "helm_next_size")
    requests = data.draw(requests_for(entry))
    p = [r[0] for r in requests]
    o = [r[1] for r in requests]
    expected = [helm_reference_runtime(entry, *r) for r in requests]
    assert predict_runtime(fit, p, o) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # The same through convert (the `convert` command's code), as an idealized or denoised fit.
    method = "denoised" if "overhead" in entry else "helm"
    fits = import_helm_table({"m": entry}, method=method)
    column = "denoised_runtime_s" if method == "denoised" else "idealized_runtime_s"
    table = RequestTable.from_columns(["m"] * len(p), p, o)
    converted = convert_requests(table, fits).columns[column]
    assert converted == pytest.approx(expected, rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(entries=st.lists(helm_entries(), min_size=1, max_size=4))
def test_either_form_round_trips_exactly(entries) -> None:
    table = {f"m{i}": entry for i, entry in enumerate(entries)}
    method = "denoised" if any("overhead" in e for e in entries) else "helm"
    assert json.dumps(export_helm_table(import_helm_table(table, method))) == json.dumps(table)


def older_form(table: dict[str, Any]) -> dict[str, Any]:
    """A shipped table keyed the way HELM's 2022 code keyed it."""
    return {
        model: {OLD_KEY if key == NEW_KEY else key: value for key, value in entry.items()}
        for model, entry in table.items()
    }


@pytest.mark.parametrize("kind", ["idealized", "denoised"])
def test_older_table_file_is_read_with_its_own_rule(kind: str, tmp_path) -> None:
    table = older_form(catalog.helm_table(kind))
    path = tmp_path / "inference_efficiency.json"
    path.write_text(json.dumps(table))
    fits = read_fit_file(path)
    assert {fit.alpha_rule for fit in fits.values()} == {"helm_next_size"}
    assert {fit.method for fit in fits.values()} == {"denoised" if kind == "denoised" else "helm"}
    model, entry = next(iter(table.items()))
    p, o = [1, 100, 257, 5000], [0, 1, 7, 64]
    expected = [helm_reference_runtime(entry, *r) for r in zip(p, o, strict=True)]
    assert predict_runtime(fits[model], p, o) == pytest.approx(expected, rel=1e-12)
    assert json.dumps(export_helm_table(fits)) == json.dumps(table)


def test_mixed_forms_keep_their_rules_and_an_entry_holds_one_form() -> None:
    new = catalog.helm_table("idealized")["openai/davinci"]
    old = older_form({"x": new})["x"]
    fits = import_helm_table({"new": new, "old": old})
    # p = 100 between profiled sizes 64 and 128: scaled down vs the 128 value as it stands.
    alpha_128 = new[NEW_KEY]["128"]
    assert predict_runtime(fits["new"], [100], [1])[0] == pytest.approx(alpha_128 * 100 / 128)
    assert predict_runtime(fits["old"], [100], [1])[0] == pytest.approx(alpha_128)
    with pytest.raises(InputError, match="has both"):
        import_helm_table({"m": {**new, OLD_KEY: new[NEW_KEY]}})
    with pytest.raises(InputError, match=OLD_KEY):
        import_helm_table({"m": {BETA_KEY: 0.1, OLD_KEY: {"1": -0.1}}})
    with pytest.raises(InputError, match=OLD_KEY):
        import_helm_table({"m": {BETA_KEY: 0.1}})
