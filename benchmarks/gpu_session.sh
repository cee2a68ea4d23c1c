#!/usr/bin/env bash
# The runner's GPU checks and measurements in one pass, for a machine with one CUDA GPU:
#   1. the CUDA tests (graph decode, CPU == CUDA logits, quantized kernels, pre-flight, profile);
#   2. decode MBU / prefill MFU against the device's measured ceilings, ours vs HF `generate`;
#   3. the HELM grid of GPT-J 6B (HELM's 2022 A100 Megatron stack profiled the same shapes);
#   4. decode speed by weight format (int8, int4, fp8 vs bf16).
# Every step has its own time limit and log; a failing step does not stop the later ones.
#
#   OUT=results bash benchmarks/gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
# The package's installed names (idealized_runtime.cost_model, .data, ...) need an install.
$PY -c "import idealized_runtime.data" 2>/dev/null ||
  $PY -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
# A GPU image without the network may lack some of our dependencies (one seen in 2026-11 had
# no pydantic): say which, once, instead of four tracebacks. Install them from wheels first.
missing=$($PY - <<'PY'
import importlib.util
need = ("torch", "numpy", "pandas", "pyarrow", "pydantic", "typer", "rich", "yaml", "transformers")
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "missing Python packages on this machine: $missing (install their wheels first)"
  exit 1
fi

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - start)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"

# COMPILE=1: our decode steps under torch.compile (fused elementwise work and dequantization).
compile_flag=${COMPILE:+--compile}
for name in ${STEPS:-tests runner_vs_hf profile_gptj quantized}; do
  case $name in
    tests) TAIL=15 step tests "${T_TESTS:-150}" $PY -m pytest -q -p no:cacheprovider \
      tests/local_runner/test_cuda.py ;;
    runner_vs_hf) step runner_vs_hf "${T_HF:-150}" $PY benchmarks/runner_vs_hf.py --device cuda \
      --arch llama-3.1-8b --repeats 5 $compile_flag ${HF_ARGS:-} ;;
    # Resumable: a partial CSV already under $OUT is completed, not redone.
    profile_gptj) step profile_gptj "${T_PROFILE:-150}" $PY -m idealized_runtime profile \
      --arch megatron-gptj-6b --device cuda --grid helm --max-prompt-tokens 2048 --repeats 3 \
      --no-progress -o "$OUT/gptj_profile.csv" ;;
    quantized) step quantized "${T_QUANT:-90}" $PY benchmarks/runner_quantized.py --device cuda \
      --arch llama-3.1-8b --layers 8 --context 512 --decode-tokens 128 $compile_flag \
      ${QUANT_ARGS:-} ;;
    *) echo "unknown step $name" ;;
  esac
done
