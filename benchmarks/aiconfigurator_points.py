"""Run under the benchmark's own AIConfigurator venv: predict serving points with NVIDIA's
AIConfigurator (``pip install aiconfigurator==0.12.0``), for ``serving_vs_published.py``.

Reads a JSON list of points on stdin (model_path, system, backend, isl, osl, concurrency, tp,
ep, attention_dp, gemm, moe, kv, nextn, nextn_accepted) and writes one JSON object per point to
stdout: ttft_s, tpot_s and output tokens/s per GPU, or the error AIConfigurator raised (a point
it does not cover). This file imports only AIConfigurator and the standard library.
"""

from __future__ import annotations

import json
import sys


def predict(point: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    try:
        result = cli_estimate(
            model_path=point["model_path"],
            system_name=point["system"],
            mode="agg",
            backend_name=point["backend"],
            backend_version=None,
            isl=point["isl"],
            osl=point["osl"],
            batch_size=max(point["concurrency"] // point["attention_dp"], 1),  # per DP rank
            # AIConfigurator splits the GPUs as tp x attention_dp (attention) = moe_tp x moe_ep.
            tp_size=point["tp"] // point["attention_dp"],
            pp_size=1,
            attention_dp_size=point["attention_dp"],
            moe_tp_size=point["tp"] // point["ep"] if point["moe"] else None,
            moe_ep_size=point["ep"] if point["moe"] else None,
            gemm_quant_mode=point["gemm"],
            moe_quant_mode=point["moe"],
            kvcache_quant_mode=point["kv"],
            nextn=point["nextn"],
            nextn_accepted=point.get("nextn_accepted"),
        )
        return {
            "ttft_s": float(result.ttft) / 1e3,
            "tpot_s": float(result.tpot) / 1e3,
            "output_tokens_per_s_per_gpu": float(result.tokens_per_second_per_gpu),
        }
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}


def main() -> None:
    points = json.load(sys.stdin)
    json.dump([predict(p) for p in points], sys.stdout)


if __name__ == "__main__":
    main()
