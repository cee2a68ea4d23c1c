#!/usr/bin/env bash
# The package as a user installs it: a wheel built from this checkout's tracked files, installed
# (not editable) into a fresh virtual environment, run from a folder outside the repository.
# Usage: .ci/wheel_smoke.sh [WORKDIR]   (needs network access to PyPI for the dependencies;
# IR_TORCH_SITE: a site-packages folder whose torch 2.13.0 is hard-linked instead of installed)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)

# A clean checkout: what git tracks or would track (ignored build outputs and caches left out).
rm -rf "$work/src" "$work/dist" "$work/venv" "$work/run"
mkdir -p "$work/src" "$work/run"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src")
python3 -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/*.whl)
echo "built $(basename "$wheel")"

python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
echo "torch==2.13.0" >"$work/constraints.txt"
# shellcheck source=.ci/link_torch.sh
. "$repo/.ci/link_torch.sh"
link_torch "$work/venv" || pip install -q torch==2.13.0
pip install -q -c "$work/constraints.txt" "$wheel"
cd "$work/run"
python - <<'EOF'
import idealized_runtime, importlib.util
assert "/venv/" in idealized_runtime.__file__, idealized_runtime.__file__
for generic in ("api", "cost_model", "local_runner", "data"):
    assert importlib.util.find_spec(generic) is None, f"{generic} is installed as a top-level name"
print("installed at", idealized_runtime.__file__)
EOF

idealized-runtime stacks >stacks.txt && head -n 3 stacks.txt
idealized-runtime estimate --arch llama-3.1-8b --hardware h100-sxm -p 512 -o 64 | tail -3
idealized-runtime import-helm "$repo/tests/importers/fixtures/helm_runs" -o helm.csv
idealized-runtime import-results "$repo/tests/importers/fixtures/guidellm_two_levels.json" \
  -o guidellm.csv
idealized-runtime demo --no-progress --workdir demo | tail -5
test -s demo/report/index.html

# The service from the installed package, on a free loopback port.
port=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
DATABASE_URL="sqlite:///$work/run/service.db" idealized-runtime serve --port "$port" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  if curl -fsS "http://127.0.0.1:$port/v1/health" >health.json 2>/dev/null; then break; fi
  sleep 0.5
done
cat health.json && echo
grep -q '"ok"' health.json
kill "$server"
wait "$server" 2>/dev/null || true
trap - EXIT
echo "wheel smoke: ok"
