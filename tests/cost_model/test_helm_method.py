"""HELM's two table forms, each checked against an independent few-line version of HELM's own
rule: the lookup of ``runtime_for_prompt_tokens`` tables (scaled by p / size) and the lookup of
the older ``runtime_for_input_tokens`` tables (unscaled inside the grid)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.convert import convert_requests
from idealized_runtime.cost_model.evaluate import predict_runtime
from idealized_runtime.cost_model.fit_files import read_fit_file
from idealized_runtime.cost_model.helm_format import export_helm_table, import_helm_table
from idealized_runtime.cost_model.measurements_io import RequestTable

NEW_KEY, OLD_KEY = "runtime_for_prompt_tokens", "runtime_for_input_tokens"
BETA_KEY = "runtime_per_output_token"


# --- independent versions of HELM's rules --------------------------------------------------------


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
