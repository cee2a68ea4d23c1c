# Sourced by .ci/run: guidellm and aiperf, the load generators of the `peers` tests
# (tests/importers/test_peers_real.py), each in its own virtual environment (they bring their own
# dependencies; guidellm's torch is pinned to the local CPU wheel), cached under
# ${IR_PEERS_CACHE:-~/.cache/ir-peers} so that later runs reuse them. Exports IR_GUIDELLM and
# IR_AIPERF, the executables the tests look for.
peers_cache="${IR_PEERS_CACHE:-$HOME/.cache/ir-peers}"
# shellcheck source=.ci/link_torch.sh
. "$(dirname "${BASH_SOURCE[0]}")/link_torch.sh"
GUIDELLM_VERSION=0.8.1
AIPERF_VERSION=0.13.0

# name version [torch]: installs into $peers_cache/name-version unless a working one is there;
# "torch" where the peer needs torch (linked from IR_TORCH_SITE where it can be).
install_peer() {
  local name=$1 version=$2 needs_torch=${3:-}
  local venv="$peers_cache/$name-$version"
  if "$venv/bin/$name" --version >/dev/null 2>&1; then
    return 0
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  echo "torch==2.13.0" > "$venv/constraints.txt"
  if [ -n "$needs_torch" ]; then
    link_torch "$venv" || true  # else pip installs the pinned wheel
  fi
  "$venv/bin/pip" install -q -c "$venv/constraints.txt" "$name==$version"
  "$venv/bin/$name" --version >/dev/null
}

mkdir -p "$peers_cache"
# Both at once: most of the time is unpacking wheels, one process per core.
install_peer guidellm "$GUIDELLM_VERSION" torch > "$peers_cache/guidellm.log" 2>&1 &
guidellm_pid=$!
install_peer aiperf "$AIPERF_VERSION" > "$peers_cache/aiperf.log" 2>&1 &
aiperf_pid=$!
for peer in guidellm aiperf; do
  pid_var="${peer}_pid"
  if ! wait "${!pid_var}"; then
    echo "installing $peer failed:" >&2
    grep -v "WARNING: Location" "$peers_cache/$peer.log" | tail -n 20 >&2
    exit 1
  fi
done
export IR_GUIDELLM="$peers_cache/guidellm-$GUIDELLM_VERSION/bin/guidellm"
export IR_AIPERF="$peers_cache/aiperf-$AIPERF_VERSION/bin/aiperf"
