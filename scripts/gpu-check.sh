#!/usr/bin/env bash
# The prepared GPU check, one command on a bare NVIDIA machine (H100/H200 class), in at most
# 8 minutes with its builds:
#
#   scripts/gpu-check.sh [REPORT.json]        (default: $OUT/gpu-check.json, else ./gpu-check.json)
#
# 1. install, offline where no registry answers, into the machine's own python (PYTHON, default
#    python3: on the GPU machines this project is lent, the virtual environment that holds torch;
#    a new environment made from it would not see that torch): Debian packages the jail needs
#    (bubblewrap) from $GPU_CHECK_CACHE/debs, and the prepared wheels from
#    $GPU_CHECK_CACHE/wheels (default .gpucheck/, made by scripts/gpu-check-prepare.sh) into a
#    plain folder by scripts/offline_install.py: only what that python lacks, and the project's
#    own two wheels for their entry points. Where no wheels were prepared and a registry
#    answers, the prepare script runs here first. Then PYTHONPATH is the checkout, its
#    trainer_client, and that folder, in that order.
# 2. scripts/gpu_check.py with the same python, under the run's deadline: the kernelbench build
#    (in the background), the GPU test tier (pytest -m gpu, in two parts), distrs up and its
#    checks, KernelBench's problems at real sizes, the hack suite, timing noise; one JSON report
#    that also holds step 1, and beside it gpu-check-logs.tgz with every log whole.
# Budget (GPU_CHECK_BUDGET_S, default 470 s for everything): install about 15 s, then the
# driver's steps (see scripts/gpu_check.py and docs/gpu-check.md). GPU_CHECK_INSTALL_ONLY=1 stops
# after step 1 and prints the PYTHONPATH to run the driver or pytest with by hand.
# Exit status: 0 when every step and check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
BUDGET_S=${GPU_CHECK_BUDGET_S:-470}
REPORT=${1:-${OUT:+$OUT/gpu-check.json}}
REPORT=${REPORT:-gpu-check.json}
CACHE=${GPU_CHECK_CACHE:-.gpucheck}
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/distrs-gpu-check.XXXXXX")
SITE=${GPU_CHECK_SITE:-$WORK/site}
INSTALL_JSON="$WORK/install.json"
export PYTHONUNBUFFERED=1

log() { echo "[gpu-check $(date +%T)] $*" >&2; }
notes=()
note() {
  notes+=("$1")
  log "$1"
}

install_system() {
  if command -v bwrap >/dev/null; then
    :
  elif compgen -G "$CACHE/debs/*.deb" >/dev/null && dpkg -i "$CACHE"/debs/*.deb >/dev/null 2>&1; then
    note "installed from $CACHE/debs: $(ls "$CACHE"/debs | tr '\n' ' ')"
  elif timeout 60 apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive timeout 120 apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1; then
    note "installed bubblewrap from the Debian/Ubuntu archive"
  fi
  command -v bwrap >/dev/null || note "no bubblewrap: the jail cannot start, so every judged type fails"
  command -v g++ >/dev/null || note "no g++: torch extensions cannot be built"
}

install_python() {
  if ! compgen -G "$CACHE/wheels/*.whl" >/dev/null; then
    note "no wheels in $CACHE/wheels: preparing them here (needs PyPI)"
    PYTHON="$PY" timeout 300 scripts/gpu-check-prepare.sh "$CACHE" \
      "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" >&2 || return 1
  fi
  local args=(--wheels "$CACHE/wheels" --target "$SITE" --report "$INSTALL_JSON")
  for n in "${notes[@]}"; do args+=(--note "$n"); done
  # this python's own packages decide what is missing, not an earlier run's folder
  env -u PYTHONPATH "$PY" scripts/offline_install.py "${args[@]}" || return 1
  export PYTHONPATH="$ROOT:$ROOT/trainer_client:$SITE"
  # what the service needs at start: its code, its dependencies, its reward types' entry points
  "$PY" - <<'PY' >&2 || return 1
import sys
from importlib.metadata import entry_points
import distrs.cli, distrs_client  # noqa: F401
types = sorted(e.name for e in entry_points(group="distrs.rewards"))
assert "kernelbench" in types and "cuda" in types, f"reward types found: {types}"
try:
    import torch
    print(f"[gpu-check] python {sys.executable} (prefix {sys.prefix}), torch {torch.__version__}, "
          f"reward types {', '.join(types)}")
except ImportError as e:
    print(f"[gpu-check] this python has no torch ({e}): the kernelbench type will not be ready")
PY
}

install_failed() {
  log "install failed"
  mkdir -p "$(dirname "$REPORT")"
  "$PY" - "$REPORT" "$INSTALL_JSON" "$(($(date +%s) - START))" "${notes[@]}" <<'PY'
import json, os, sys
report, install_json, secs, *notes = sys.argv[1:]
install = json.load(open(install_json)) if os.path.exists(install_json) else {}
install.update(rc=install.get("rc") or 1, seconds=float(secs), notes=notes + install.get("notes", []))
json.dump({"format": "distrs-gpu-check/2", "ok": False, "failed": ["install"], "install": install},
          open(report, "w"), indent=2)
PY
  exit 1
}

log "install ($PY)"
install_system
install_python || install_failed
log "install done in $(($(date +%s) - START)) s"
if [ -n "${GPU_CHECK_INSTALL_ONLY:-}" ]; then # the install alone (to run the driver or pytest by hand)
  echo "export PYTHONPATH=$PYTHONPATH"
  exit 0
fi

"$PY" scripts/gpu_check.py --report "$REPORT" --deadline-unix "$((START + BUDGET_S))" --work "$WORK" \
  --install "$INSTALL_JSON"
rc=$?
# every log whole beside the report (the report keeps only their ends)
(cd "$WORK" && tar czf "$(dirname "$REPORT")/gpu-check-logs.tgz" --ignore-failed-read ./*.log ./*.xml ./*.json) 2>/dev/null
log "done in $(($(date +%s) - START)) s; report $REPORT"
exit $rc
