#!/usr/bin/env bash
# The prepared GPU check, one command on a bare NVIDIA machine (H100/H200 class, ~8 minutes):
#
#   scripts/gpu-check.sh [REPORT.json]        (default: $OUT/gpu-check.json, else ./gpu-check.json)
#
# 1. install: Debian packages the jail and nvcc need (bubblewrap, g++) when missing, and a virtual
#    environment .venv (with the machine's own Python packages visible, e.g. its torch) holding
#    distrs and its runtime dependencies: from PyPI, or offline from $GPU_CHECK_CACHE/wheels and
#    $GPU_CHECK_CACHE/debs (default .gpucheck/) made by scripts/gpu-check-prepare.sh on a machine
#    that reaches the registries;
# 2. make test-gpu (the tests marked gpu), JUnit XML kept for the report;
# 3. scripts/gpu_check.py: distrs up with CPU compile workers and one GPU execute worker, then
#    the checks of its CHECKS list (health, the cuda type's programs, timing noise, a CUDA error,
#    GPU metrics, a ten-problem kernelbench slice and its timing noise), writing one JSON report
#    that also holds steps 1 and 2.
# Exit status: 0 when every step and check passed.
set -uo pipefail
cd "$(dirname "$0")/.."

REPORT=${1:-${OUT:+$OUT/gpu-check.json}}
REPORT=${REPORT:-gpu-check.json}
CACHE=${GPU_CHECK_CACHE:-.gpucheck}
PYTHON=${PYTHON:-python3}
TEST_GPU_TIMEOUT=${TEST_GPU_TIMEOUT:-240}
CHECK_BUDGET=${CHECK_BUDGET:-330}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/distrs-gpu-check.XXXXXX")
INSTALL_JSON="$WORK/install.json"
export PYTHONUNBUFFERED=1

log() { echo "[gpu-check $(date +%T)] $*" >&2; }
notes=()
note() { notes+=("$1"); log "$1"; }

install_system() {
  local need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v g++ >/dev/null || need+=(g++)
  [ ${#need[@]} -eq 0 ] && return 0
  if compgen -G "$CACHE/debs/*.deb" >/dev/null; then
    dpkg -i "$CACHE"/debs/*.deb >/dev/null 2>&1 && note "installed from $CACHE/debs: ${need[*]}"
  fi
  need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v g++ >/dev/null || need+=(g++)
  [ ${#need[@]} -eq 0 ] && return 0
  if timeout 120 apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive timeout 180 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
    note "installed from Debian/Ubuntu packages: ${need[*]}"
  else
    note "could not install ${need[*]} (no package registry reachable)"
  fi
  if ! command -v bwrap >/dev/null; then
    export DISTRS_SANDBOX_ALLOW_DEGRADED=true
    note "no bubblewrap: programs run in the degraded sandbox (DISTRS_SANDBOX_ALLOW_DEGRADED=true)"
  fi
}

install_python() {
  if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv --system-site-packages .venv || return 1
  fi
  local pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
  if compgen -G "$CACHE/wheels/*.whl" >/dev/null; then
    local offline=("${pip[@]}" --no-index --find-links "$CACHE/wheels")
    "${offline[@]}" 'setuptools>=77' wheel || return 1
    if "${offline[@]}" --no-build-isolation -e . -e ./trainer_client 'pytest-asyncio>=0.23' 'pytest-timeout>=2.3'; then
      note "python packages from $CACHE/wheels (offline) over $("$PYTHON" -c 'import sys; print(sys.prefix)')"
    else
      # A version the machine's own packages pin differently (protobuf, say): take the wheels as
      # they are rather than fail; the tests then say whether that matters.
      "${offline[@]}" --no-deps "$CACHE"/wheels/*.whl &&
        "${offline[@]}" --no-deps --no-build-isolation -e . -e ./trainer_client || return 1
      note "python packages from $CACHE/wheels without dependency resolution (it failed)"
    fi
  else
    # Runtime dependencies and the pytest plugins the GPU tier uses; not the dev tools (linters,
    # chart schemas), which no GPU test needs.
    "${pip[@]}" -e . -e ./trainer_client 'pytest>=8.2' 'pytest-asyncio>=0.23' 'pytest-timeout>=2.3' || return 1
    note "python packages from PyPI"
  fi
  touch .venv/.installed # make test-gpu then uses this environment as it is
}

write_install_json() {
  .venv/bin/python - "$INSTALL_JSON" "$1" "$2" "${notes[@]}" <<'PY' 2>/dev/null || true
import json, sys
path, rc, secs, *notes = sys.argv[1:]
json.dump({"rc": int(rc), "seconds": float(secs), "notes": notes}, open(path, "w"))
PY
}

t0=$(date +%s)
log "install"
install_system
install_python
install_rc=$?
write_install_json "$install_rc" "$(($(date +%s) - t0))"
if [ "$install_rc" -ne 0 ]; then
  log "install failed"
  mkdir -p "$(dirname "$REPORT")"
  printf '{"format": "distrs-gpu-check/1", "ok": false, "failed": ["install"], "install": {"notes": "%s"}}\n' \
    "$(printf '%s; ' "${notes[@]}")" >"$REPORT"
  exit 1
fi

log "make test-gpu"
t1=$(date +%s)
if command -v make >/dev/null; then
  timeout "$TEST_GPU_TIMEOUT" make -s test-gpu PYTEST_ARGS="-q -p no:cacheprovider --junitxml=$WORK/test-gpu.xml" 2>&1 |
    tee "$WORK/test-gpu.log" | tail -n 25 >&2
  test_rc=${PIPESTATUS[0]}
else
  timeout "$TEST_GPU_TIMEOUT" .venv/bin/python -m pytest -m gpu tests/integration tests/e2e \
    --ignore=tests/integration/k8s --ignore=tests/integration/placement \
    -q -p no:cacheprovider --junitxml="$WORK/test-gpu.xml" 2>&1 | tee "$WORK/test-gpu.log" | tail -n 25 >&2
  test_rc=${PIPESTATUS[0]}
fi
test_s=$(($(date +%s) - t1))

log "checks through distrs up"
.venv/bin/python scripts/gpu_check.py --report "$REPORT" --budget-s "$CHECK_BUDGET" --work "$WORK" \
  --junit "$WORK/test-gpu.xml" --test-gpu-rc "$test_rc" --test-gpu-seconds "$test_s" --install "$INSTALL_JSON"
rc=$?
log "done in $(($(date +%s) - t0)) s; report $REPORT"
exit $rc
