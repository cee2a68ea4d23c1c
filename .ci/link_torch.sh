# Sourced by the CI scripts. link_torch VENV: the torch that IR_TORCH_SITE (a site-packages
# folder) holds, installed from the same local CPU wheel, hard-linked into VENV's site-packages
# instead of a second copy on the disk (about 750 MB each). Returns 1, leaving nothing behind,
# where IR_TORCH_SITE is unset, holds no torch 2.13.0, or is on another filesystem; the caller
# then installs torch from the wheel.
link_torch() {
  local venv=$1 dst record top
  local -a tops=()
  [ -n "${IR_TORCH_SITE:-}" ] || return 1
  record=$(ls "$IR_TORCH_SITE"/torch-2.13.0*.dist-info/RECORD 2>/dev/null | head -n 1)
  [ -n "$record" ] || return 1
  dst=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # The wheel's top-level folders, from its RECORD (its scripts under ../../bin are left out).
  mapfile -t tops < <(cut -d, -f1 "$record" | cut -d/ -f1 | grep -v '^\.\.$' | sort -u)
  for top in "${tops[@]}"; do
    if ! cp -al "$IR_TORCH_SITE/$top" "$dst/" 2>/dev/null; then
      for top in "${tops[@]}"; do rm -rf "${dst:?}/$top"; done
      return 1
    fi
  done
}
