"""HELM tables: exact round trip, and HELM's method reproduces HELM's published betas."""

from __future__ import annotations

import json

import pytest

from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.fitting.fit_files import read_fit_file, write_fit_file
from idealized_runtime.cost_model.fitting.helm_format import export_helm_table, import_helm_table
from idealized_runtime.cost_model.fitting.methods import fit_measurements


@pytest.mark.parametrize("kind", ["idealized", "denoised"])
def test_import_export_round_trip_is_exact(kind: str) -> None:
    table = catalog.helm_table(kind)
    method = "denoised" if kind == "denoised" else "helm"
    exported = export_helm_table(import_helm_table(table, method=method))
    # Same keys in the same order and bit-identical floats: the serialised JSON is identical.
    assert json.dumps(exported) == json.dumps(table)


@pytest.mark.parametrize("kind", ["idealized", "denoised"])
def test_helm_file_is_detected_and_written_back_identically(kind: str, tmp_path) -> None:
    source = catalog.data_path("reference", f"inference_{kind}_runtimes.json")
    fits = read_fit_file(source)
    assert {fit.method for fit in fits.values()} == {"denoised" if kind == "denoised" else "helm"}
    out = tmp_path / "helm.json"
    write_fit_file(fits, out, format="helm")
    assert json.loads(out.read_text()) == json.loads(source.read_text())
    assert list(json.loads(out.read_text())) == list(json.loads(source.read_text()))


def test_helm_method_reproduces_helm_betas(a100_grid) -> None:
    fits = fit_measurements(a100_grid, "helm")
    table = catalog.helm_table("idealized")
    compared = 0
    for helm_name, profile in catalog.helm_model_shapes().items():
        if helm_name in table and profile in fits:
            assert round(fits[profile].beta_s, 3) == table[helm_name]["runtime_per_output_token"]
            compared += 1
    assert compared >= 10


@pytest.mark.parametrize(
    "table, message",
    [
        ({}, "non-empty"),
        ({"m": {"runtime_per_output_token": 0.1}}, "expected keys"),
        ({"m": {"runtime_per_output_token": 0.1, "runtime_for_prompt_tokens": {"x": 1}}}, "x"),
        ({"m": {"runtime_per_output_token": -1, "runtime_for_prompt_tokens": {"1": 1}}}, "0 and"),
        (
            {"m": {"runtime_per_output_token": 1, "runtime_for_prompt_tokens": {"1": 2e6}}},
            "1e\\+06",
        ),
        ({"m": {"runtime_per_output_token": 1, "runtime_for_prompt_tokens": {"0": 1}}}, "positive"),
    ],
)
def test_bad_helm_tables_are_input_errors(table, message) -> None:
    with pytest.raises(InputError, match=message):
        import_helm_table(table)


def test_helm_table_prompt_sizes_in_any_order() -> None:
    """A JSON object has no order: the sizes are sorted for HELM's lookup, as the service does."""
    table = {
        "m": {"runtime_per_output_token": 0.05, "runtime_for_prompt_tokens": {"256": 0.2, "1": 0.1}}
    }
    fit = import_helm_table(table)["m"]
    assert fit.prompt_sizes == [1, 256] and fit.prompt_runtimes_s == [0.1, 0.2]
    assert list(export_helm_table({"m": fit})["m"]["runtime_for_prompt_tokens"]) == ["1", "256"]


def test_default_fit_exports_to_helm_form(a100_grid) -> None:
    fits = fit_measurements(a100_grid, "default")
    exported = export_helm_table(fits)
    entry = exported["megatron-gptj-6b"]
    assert set(entry) == {"runtime_per_output_token", "runtime_for_prompt_tokens"}
    # The projection of a context-dependent beta stays close to HELM's constant beta.
    assert entry["runtime_per_output_token"] == pytest.approx(0.021, abs=0.002)
