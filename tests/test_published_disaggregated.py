"""data/published/disaggregated.csv: every row validates, names known GPUs, engines and models,
and says where it comes from."""

from __future__ import annotations

from idealized_runtime.core.catalog import architectures, hardware_catalog
from idealized_runtime.core.published_disaggregated import load_disaggregated
from idealized_runtime.cost_model.hardware.engines.catalog import shipped_engines


def test_rows_name_known_things_and_their_source() -> None:
    points = load_disaggregated()
    assert len(points) > 100
    assert len({p.row_id for p in points}) == len(points)
    engines = shipped_engines()
    for p in points:
        assert p.gpu in hardware_catalog() and p.model in architectures()
        assert p.gpu in engines[p.engine].gpus, p.row_id
        assert p.source_url.startswith("https://") and len(p.commit) == 40
        assert p.source_id.endswith(p.source_url.split("/runs/")[1].split("/")[0])
        assert p.prefill_gpus % p.prefill_workers == 0 and p.decode_gpus % p.decode_workers == 0


def test_throughput_per_gpu_counts_both_pools() -> None:
    point = load_disaggregated()[0]
    total = point.output_tokens_per_s_per_gpu * (point.prefill_gpus + point.decode_gpus)
    assert total == point.output_tokens_per_s_per_decode_gpu * point.decode_gpus
