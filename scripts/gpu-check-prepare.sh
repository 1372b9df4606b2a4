#!/usr/bin/env bash
# Prepares scripts/gpu-check.sh for a GPU machine that reaches no package registry: run it here
# (where PyPI and the Debian mirrors answer), then copy the folder along with the repository.
#
#   scripts/gpu-check-prepare.sh [DEST=.gpucheck] [PYTHON_VERSION=3.12]
#
# DEST/wheels: manylinux x86_64 wheels of distrs' runtime dependencies (pyproject.toml, not the
# dev tools) for PYTHON_VERSION, plus setuptools/wheel (the editable install builds offline) and
# the pytest plugins the GPU tier uses. Wheels of projects the GPU machine's image already has are
# dropped (GPU_CHECK_PROVIDED, a space-separated list of project names; default: what the CUDA
# images lent to this project hold: numpy, scipy, torch's stack, httpx, pytest ...), which keeps
# DEST near 45 MiB (ortools alone is 29). DEST/debs: bubblewrap, for a machine without it.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpucheck}
PYVER=${2:-3.12}
PROVIDED=${GPU_CHECK_PROVIDED:-"numpy scipy matplotlib pandas sympy mpmath pyyaml httpx httpcore anyio h11 idna
certifi sniffio typer click rich pygments markdown-it-py mdurl shellingham prometheus-client nvidia-ml-py
pytest pluggy iniconfig packaging hypothesis sortedcontainers attrs pytest-timeout protobuf absl-py
requests urllib3 charset-normalizer six python-dateutil pillow kiwisolver fonttools cycler contourpy
pyparsing uvloop typing-extensions filelock aiohttp aiosignal frozenlist multidict yarl propcache
aiohappyeyeballs jinja2 markupsafe tzdata psutil"}
mkdir -p "$DEST/wheels" "$DEST/debs"
PY=${PYTHON:-python3}

deps=$("$PY" - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
)
mapfile -t reqs <<<"$deps"
reqs+=("setuptools>=77" "wheel" "pytest-asyncio>=0.23" "pytest-timeout>=2.3" "httpx>=0.27")

"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$DEST/wheels" "${reqs[@]}"

# Drop what the GPU machine already has (its versions satisfy distrs' lower bounds).
for name in $PROVIDED; do
  norm=$(echo "$name" | tr 'A-Z-' 'a-z_')
  for f in "$DEST"/wheels/*.whl; do
    base=$(basename "$f" | cut -d- -f1 | tr 'A-Z-' 'a-z_')
    if [ "$base" = "$norm" ]; then rm -f "$f"; fi
  done
done

(cd "$DEST/debs" && apt-get download bubblewrap >/dev/null 2>&1) || echo "no bubblewrap .deb (apt-get download failed)" >&2
du -sh "$DEST"
echo "prepared $DEST: $(ls "$DEST"/wheels | wc -l) wheels, $(ls "$DEST"/debs | wc -l) debs" >&2
