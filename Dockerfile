# One image for every PopuLoRA service; the command picks the service:
#   populora serve {inference,trainer,league,sandbox,evolver} --config /etc/populora/config.yaml
#   populora train --config /etc/populora/config.yaml --mode distributed      (the coordinator)
# Variants (build arg VARIANT):
#   cpu  (default)  torch 2.13.0 CPU wheel; the `hf` inference backend; runs the `tiny` and `smollm2-135m` setups.
#   cuda            torch 2.13.0 from PyPI (CUDA libraries come as wheels; the host needs only the NVIDIA driver
#                   and the container toolkit) plus vLLM for the `vllm` inference backend.
# No model weights are baked in: mount a local model directory at /models (see docs/operations.md).
#
# Needs BuildKit (cache and secret mounts): Docker's own `docker build` up to 22.x with DOCKER_BUILDKIT=1, or
# `docker buildx build`. `make images` picks whichever the machine has (scripts/images.sh).
#   DOCKER_BUILDKIT=1 docker build -t populora:cpu .
#   DOCKER_BUILDKIT=1 docker build --build-arg VARIANT=cuda -t populora:cuda .
# Build arguments:
#   BASE_IMAGE       a Debian bookworm image with Python 3.11 (the public python image by default; `make images
#                    LOCAL_BASE=1` builds one from Debian's mirror for machines that reach no image registry)
#   PIP_INDEX_URL    the package index (PyPI by default)
#   TORCH_INDEX_URL  where the cpu variant finds torch; a wheel `torch-<version>+cpu-*.whl` in deploy/wheels/
#                    is used instead when present (for machines that do not reach that index)
# Build secret `ca` (optional): an extra CA bundle for a TLS-intercepting proxy between the build and the index,
#   --secret id=ca,src=/etc/ssl/certs/ca-certificates.crt. It is read from a secret mount only while pip runs and
#   is never written into a layer.
# No `# syntax=` line: the Dockerfile frontend built into BuildKit is enough, and fetching another one from a
# registry would fail on machines that reach none.

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Extra packages of the cuda variant; pin vLLM to a release built against TORCH_VERSION.
ARG CUDA_EXTRAS=vllm
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_INDEX_URL=${PIP_INDEX_URL} \
    PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv
# torch first, in its own layer: it is most of the image and changes least. scripts/image_pip.py runs pip with
# the CA secret (when given) and says plainly why an index cannot be used; pip's cache is a cache mount, kept
# between builds and never part of the image.
RUN --mount=type=secret,id=ca --mount=type=tmpfs,target=/run/ca --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=scripts/image_pip.py,target=/run/image_pip.py \
    --mount=type=bind,source=deploy/wheels,target=/wheels \
    case "$VARIANT" in \
      cpu)  if ls /wheels/torch-"${TORCH_VERSION}"+cpu-*.whl >/dev/null 2>&1; then \
              python /run/image_pip.py install --find-links /wheels "torch==${TORCH_VERSION}+cpu"; \
            else \
              python /run/image_pip.py install --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"; \
            fi ;; \
      cuda) python /run/image_pip.py install "torch==${TORCH_VERSION}" ;; \
      *)    echo "VARIANT must be cpu or cuda, not '$VARIANT'" >&2; exit 1 ;; \
    esac
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
# The dependencies (pyproject.toml's list) next, in their own layer: a change to the source alone does not
# reinstall them.
RUN --mount=type=secret,id=ca --mount=type=tmpfs,target=/run/ca --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=scripts/image_pip.py,target=/run/image_pip.py \
    python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > /tmp/requirements.txt \
    && python /run/image_pip.py install -c constraints.txt -r /tmp/requirements.txt \
    && if [ "$VARIANT" = cuda ]; then python /run/image_pip.py install -c constraints.txt $CUDA_EXTRAS; fi \
    && rm /tmp/requirements.txt
COPY populora ./populora
COPY services ./services
COPY coordinator ./coordinator
COPY bench ./bench
COPY proto ./proto
COPY configs ./configs
# Editable install: presets (configs/) and contracts (proto/) are found next to the package, as in a checkout.
RUN --mount=type=secret,id=ca --mount=type=tmpfs,target=/run/ca --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,source=scripts/image_pip.py,target=/run/image_pip.py \
    python /run/image_pip.py install --no-deps -c constraints.txt -e . \
    && python -m pip check \
    && python -m populora.protoc \
    && find /opt/venv /app -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE} AS runtime
ARG VARIANT=cpu
# tini reaps the sandbox's forked job processes and forwards SIGTERM; bubblewrap is the sandbox's namespace
# layer outside gVisor; gcc lets Triton (vLLM, cuda variant) compile its launcher stubs. Only what the base
# lacks is installed (Debian's mirror, plain HTTP with signed indexes), so a base that has them needs no network.
RUN want="tini bubblewrap ca-certificates"; \
    if [ "$VARIANT" = cuda ]; then want="$want gcc libc6-dev"; fi; \
    missing=""; for p in $want; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done; \
    if [ -n "$missing" ]; then \
      apt-get update && apt-get install -y --no-install-recommends $missing && rm -rf /var/lib/apt/lists/*; \
    fi \
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
