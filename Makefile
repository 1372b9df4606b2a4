# Single entry point. Every target installs what it needs first, so a fresh clone works.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: all install system-deps demo up test test-wheels test-fast test-slow test-pods test-kernel-images test-gpu images lint bench clean

all: test

# Debian packages the tests use for real: redis-server, prometheus, bubblewrap (sandbox), g++.
system-deps:
	@./scripts/system-deps.sh

# setup.py and the C source: the editable install builds the C serve loops in place
# (distrs/scaling/_serve.abi3.so; skipped, with the Python loops instead, where no C compiler is).
$(STAMP): pyproject.toml setup.py distrs/scaling/_serve.c trainer_client/pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,kernels]' -e './trainer_client[ray]'  # ray: the Ray rollout hook test (~260 MB, ~40 s)
	@touch $(STAMP)

install: system-deps $(STAMP)

# The demo needs the service alone: no system packages (its synthetic reward type only sleeps)
# and no extras (tests, kernels' torch, Ray), so a fresh clone runs it after a short install.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml setup.py distrs/scaling/_serve.c
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/distrs demo

up: install
	$(VENV)/bin/distrs up --insecure

# The trainers' own client code (verl, OpenRLHF, TRL) is loaded from their published wheels, fetched
# once into a cached wheelhouse (tests/integration/compat/framework_sources.py reads the same folder).
WHEELHOUSE ?= $(HOME)/.cache/distrs-test-wheels
TEST_WHEELS := verl==0.9.1 openrlhf==0.11.2 trl==1.16.0
test-wheels: $(STAMP)
	@for w in $(TEST_WHEELS); do \
	  ls $(WHEELHOUSE)/$$(echo $$w | sed 's/==/-/')-*.whl >/dev/null 2>&1 || \
	  $(PIP) download -q --no-deps "$$w" -d $(WHEELHOUSE); \
	done

# Under CI=true a test that would skip for a missing component fails instead (tests/requirements.py);
# only GPU tests skip. The run ends with a summary of what was skipped and why.
test: install test-wheels
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: install
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# The pod-runtime tier alone: built images, the rendered chart, podman containers.
test-pods: install
	$(PY) -m pytest -m pods tests/pods $(PYTEST_ARGS)

# The kernel-images tier: worker-kernels and worker-gpu-kernels built (multi-GB; FROM the worker
# images, so a source change rebuilds them) and run as pods. Not part of `make test`.
test-kernel-images: install
	$(PY) -m pytest -m kernel_images --kernel-images tests/pods $(PYTEST_ARGS)

# The GPU tier: tests marked gpu (they skip where no NVIDIA GPU is present). GPU tests live under
# tests/integration and tests/e2e (a unit test checks this); the k8s and placement folders need
# dev-only schema packages and hold none, so a GPU machine needs only the runtime dependencies.
# Needs the virtual environment only (no apt). GPU_PY=python3 runs the tier with another
# interpreter instead of installing .venv: a GPU machine's own python, whose torch lives in a
# virtual environment of its own (scripts/gpu-check.sh runs the tier that way, PYTHONPATH set).
GPU_TESTS ?= tests/integration tests/e2e --ignore=tests/integration/k8s --ignore=tests/integration/placement
GPU_PY ?=
test-gpu: $(if $(GPU_PY),,$(STAMP))
	$(or $(GPU_PY),$(PY)) -m pytest -m gpu $(GPU_TESTS) $(PYTEST_ARGS)

# Service, CPU-worker and GPU-worker images, offline from local Debian bases (scripts/build_images.py;
# cached under /var/tmp/distrs-images). IMAGE_TOOL=docker|podman|buildah picks the tool;
# CUDA_IMAGE=nvidia/cuda:...-runtime-... builds the GPU worker on that image (needs its registry).
# IMAGES="worker-kernels worker-gpu-kernels": the kernelbench images (torch + nvcc; ~6 GB more each, docs/kernels.md).
images: install
	$(PY) scripts/build_images.py $(IMAGES)

lint: $(STAMP)
	$(VENV)/bin/ruff check distrs trainer_client tests benchmarks
	$(VENV)/bin/ruff format --check distrs trainer_client tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix distrs trainer_client tests benchmarks
	$(VENV)/bin/ruff format distrs trainer_client tests benchmarks

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build/lib.* build/temp.* distrs/scaling/*.so
