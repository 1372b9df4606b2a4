#!/usr/bin/env bash
# Prepares scripts/gpu-check.sh for a GPU machine that reaches no package registry: run it here
# (where PyPI and the Debian mirrors answer), then copy the folder along with the checkout.
#
#   scripts/gpu-check-prepare.sh [DEST=.gpucheck] [PYTHON_VERSION=3.12]
#
# DEST/wheels, installed there by scripts/offline_install.py into a plain folder on PYTHONPATH
# (the machine's python keeps its own torch):
#   - the project's own wheels, distrs and distrs-client (built here): their metadata carries
#     the entry points (distrs.rewards) that name the reward types. distrs's is a platform wheel
#     (cp311-abi3-linux_x86_64: the C serve loops of the planner's simulation, for any CPython
#     3.11+; offline_install.py takes it by its tags) when this machine has a C compiler; the
#     check imports distrs from the checkout, where the Python loops stand in for them;
#   - manylinux x86_64 wheels of distrs' runtime dependencies for PYTHON_VERSION and the pytest
#     plugin the GPU tier needs (pytest-asyncio), less the projects the GPU machine's image
#     already has (GPU_CHECK_PROVIDED, space-separated; default: the image's package list) and
#     those only other features import (GPU_CHECK_LEAVE_OUT; default: ortools, for the
#     placement ILP, and kubernetes, for the Kubernetes actuator; about 35 MiB together).
# DEST/debs: bubblewrap, for a machine without it.
# What the folder holds is listed in DEST/manifest.txt; it stays far below the 64 MiB a checkout
# may carry to a lent machine.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.gpucheck}
PYVER=${2:-3.12}
PY=${PYTHON:-python3}
LEAVE_OUT=${GPU_CHECK_LEAVE_OUT:-"ortools kubernetes"}
# The GPU image's Python packages (what a machine of this kind was seen to hold).
PROVIDED=${GPU_CHECK_PROVIDED:-"absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs build certifi charset-normalizer click cloudpickle colorama contourpy coverage cycler
filelock fonttools frozenlist fsspec grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig jinja2 joblib kiwisolver lxml markdown markdown-it-py
markupsafe matplotlib mdurl ml-dtypes mpmath msgpack multidict mypy-extensions networkx ninja
numpy nvidia-ml-py packaging pandas pathspec pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 pygments pyparsing pytest pytest-timeout
python-dateutil pyyaml regex requests rich safetensors scipy setuptools shellingham simplejson
six sortedcontainers sympy tabulate threadpoolctl toolz torch tqdm typer typing-extensions
typing-inspect urllib3 uvloop werkzeug wheel wrapt xxhash yarl zipp"}
mkdir -p "$DEST/wheels" "$DEST/debs"
rm -f "$DEST"/wheels/*.whl

# The project's own wheels (no dependencies: those follow, for the GPU machine's python);
# setuptools' build folders it leaves in the checkout go again.
leftovers=()
for d in build trainer_client/build distrs.egg-info trainer_client/distrs_client.egg-info; do
  [ -e "$d" ] || leftovers+=("$d")
done
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$DEST/wheels" . ./trainer_client
rm -rf "${leftovers[@]}"

deps=$("$PY" - "$LEAVE_OUT" <<'PY'
import re, sys, tomllib
leave = {re.sub(r"[-_.]+", "-", n).lower() for n in sys.argv[1].split()}
for req in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
    if re.sub(r"[-_.]+", "-", name).lower() not in leave:
        print(req)
PY
)
mapfile -t reqs <<<"$deps"
reqs+=("pytest-asyncio>=0.23")

"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$DEST/wheels" "${reqs[@]}"

# Drop what the GPU machine already has (offline_install.py checks again there, by version).
for name in $PROVIDED; do
  norm=$(echo "$name" | tr 'A-Z.-' 'a-z__')
  for f in "$DEST"/wheels/*.whl; do
    base=$(basename "$f" | cut -d- -f1 | tr 'A-Z.-' 'a-z__')
    if [ "$base" = "$norm" ]; then rm -f "$f"; fi
  done
done

(cd "$DEST/debs" && apt-get download bubblewrap >/dev/null 2>&1) || echo "no bubblewrap .deb (apt-get download failed)" >&2
(cd "$DEST" && ls wheels debs && du -sh .) >"$DEST/manifest.txt"
du -sh "$DEST"
echo "prepared $DEST: $(ls "$DEST"/wheels | wc -l) wheels, $(ls "$DEST"/debs | wc -l) debs" >&2
