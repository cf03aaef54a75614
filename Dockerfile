# syntax=docker/dockerfile:1.7
# One image for every PopuLoRA service; the command picks the service:
#   populora serve {inference,trainer,league,sandbox,evolver} --config /etc/populora/config.yaml
#   populora train --config /etc/populora/config.yaml --mode distributed      (the coordinator)
# Variants (build arg VARIANT):
#   cpu  (default)  torch 2.13.0 CPU wheel; the `hf` inference backend; runs the `tiny` and `smollm2-135m` setups.
#   cuda            torch 2.13.0 from PyPI (CUDA libraries come as wheels; the host needs only the NVIDIA driver
#                   and the container toolkit) plus vLLM for the `vllm` inference backend.
# No model weights are baked in: mount a local model directory at /models (see docs/operations.md).
#   docker build -t populora:cpu .
#   docker build --build-arg VARIANT=cuda -t populora:cuda .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
# Extra packages of the cuda variant; pin vLLM to a release built against TORCH_VERSION.
ARG CUDA_EXTRAS=vllm
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
# torch first, in its own layer: it is most of the image and changes least.
RUN case "$VARIANT" in \
      cpu)  pip install --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}" ;; \
      cuda) pip install "torch==${TORCH_VERSION}" ;; \
      *)    echo "VARIANT must be cpu or cuda, not '$VARIANT'" >&2; exit 1 ;; \
    esac
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY populora ./populora
COPY services ./services
COPY coordinator ./coordinator
COPY bench ./bench
COPY proto ./proto
COPY configs ./configs
# Editable install: presets (configs/) and contracts (proto/) are found next to the package, as in a checkout.
RUN pip install -c constraints.txt -e . \
    && if [ "$VARIANT" = cuda ]; then pip install -c constraints.txt $CUDA_EXTRAS; fi \
    && python -m populora.protoc

FROM ${PYTHON_IMAGE} AS runtime
ARG VARIANT=cpu
# tini reaps the sandbox's forked job processes and forwards SIGTERM; bubblewrap is the sandbox's namespace
# layer; gcc lets Triton (vLLM, cuda variant) compile its launcher stubs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini bubblewrap ca-certificates \
    && if [ "$VARIANT" = cuda ]; then apt-get install -y --no-install-recommends gcc libc6-dev; fi \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 populora \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/populora --shell /usr/sbin/nologin populora \
    && mkdir -p /data /models /etc/populora \
    && chown populora:populora /data
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    POPULORA_LOG_JSON=1 \
    POPULORA_CACHE=/home/populora/.cache/populora \
    POPULORA_CONFIG=/etc/populora/config.yaml \
    POPULORA_VARIANT=${VARIANT}
WORKDIR /app
USER 10001:10001
# Which service a container runs is set by POPULORA_SERVICE; the check asks that service's gRPC health service
# on the port the configuration gives it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "populora.healthcheck"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["populora", "--help"]
