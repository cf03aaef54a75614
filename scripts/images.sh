#!/usr/bin/env bash
# `make images`: the images of the Compose stack. The base, Postgres and Redis images are built once and reused
# (REBUILD=1 rebuilds them); the project image is built every time from this checkout, which Docker's layer cache
# and a pip cache mount make take seconds when only the source changed.
#
#   LOCAL_BASE=auto|1|0   1: build a base image from Debian's mirror (debootstrap + docker import), and Postgres
#                         and Redis images from Debian's packages on it: no image registry needed. 0: the public
#                         python, postgres and redis images. auto (default): public when available, else local.
#   BASE_IMAGE            the project image's base (LOCAL_BASE=0; default python:3.11-slim-bookworm)
#   VARIANT               cpu (default) or cuda
#   CA_BUNDLE             an extra CA bundle for pip inside the build (a build secret, never in a layer); by
#                         default the host's system bundle when it exists; CA_BUNDLE= (empty) gives none
#   TORCH_WHEEL           a local torch-<version>+cpu wheel to install instead of fetching one from TORCH_INDEX_URL
#   TORCH_INDEX_URL       the CPU torch index (default https://download.pytorch.org/whl/cpu)
#   PIP_INDEX_URL         the package index inside the build (default https://pypi.org/simple)
#   DEBIAN_MIRROR         for LOCAL_BASE=1 (default http://deb.debian.org/debian)
#   REBUILD=1             rebuild the base, Postgres and Redis images too
#
# Writes build/compose-images.env: the image variables docker-compose needs to run what was built.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/docker_common.sh
. "$ROOT/scripts/docker_common.sh"

TORCH_VERSION=$(sed -n 's/^torch==\([0-9.]*\)$/\1/p' "$ROOT/constraints.txt")
[ -n "$TORCH_VERSION" ] || die "constraints.txt pins no torch==X.Y.Z"
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
WHEELS="$ROOT/deploy/wheels"

case "$VARIANT" in cpu|cuda) ;; *) die "VARIANT must be cpu or cuda, not '$VARIANT'" ;; esac

ensure_docker
find_builder
resolve_images

# ---- the base image from Debian's mirror ------------------------------------------------------------------------
build_local_base() {
    [ "$(id -u)" = 0 ] || die "building the base image from Debian's mirror needs root (debootstrap); run as root, \
or use LOCAL_BASE=0 with a base image this machine has"
    command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install debootstrap"
    local dir
    dir=$(mktemp -d /var/tmp/populora-base.XXXXXX)
    trap 'rm -rf "$dir"' RETURN
    note "debootstrap $SUITE from $DEBIAN_MIRROR (python3, python3-venv, ca-certificates, tini, bubblewrap)"
    local t0=$SECONDS
    nice -n 5 debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,tini,bubblewrap \
        "$SUITE" "$dir" "$DEBIAN_MIRROR" >"$dir.log" 2>&1 \
        || die "debootstrap failed (is $DEBIAN_MIRROR reachable?): $(tail -3 "$dir.log")"
    rm -f "$dir.log"
    local security=${DEBIAN_MIRROR%/debian}/debian-security
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' "$DEBIAN_MIRROR" "$SUITE" \
        "$DEBIAN_MIRROR" "$SUITE" "$security" "$SUITE" >"$dir/etc/apt/sources.list"
    # as in Debian's own container images: package scripts never start services in an image build
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    printf 'APT::Install-Recommends "false";\n' >"$dir/etc/apt/apt.conf.d/90populora-no-recommends"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/*.log
    tar -C "$dir" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' - "$LOCAL_BASE_IMAGE" >/dev/null
    note "built $LOCAL_BASE_IMAGE in $((SECONDS - t0)) s"
}

build() {  # build IMAGE CONTEXT [docker build arguments...]
    local image=$1 context=$2 t0=$SECONDS
    shift 2
    note "building $image"
    nice -n 5 "${BUILD[@]}" -t "$image" "$@" "$context" || die "building $image failed (see the output above)"
    note "built $image in $((SECONDS - t0)) s"
}

wanted() { [ "${REBUILD:-0}" = 1 ] || ! image_exists "$1"; }

if [ "$LOCAL_BASE" = 1 ]; then
    if [ "${REBUILD:-0}" = 1 ] || ! image_exists "$LOCAL_BASE_IMAGE"; then build_local_base; fi
    for svc in postgres redis; do
        image=$LOCAL_POSTGRES_IMAGE
        [ "$svc" = redis ] && image=$LOCAL_REDIS_IMAGE
        if wanted "$image"; then
            build "$image" "$ROOT/deploy/images/$svc" --build-arg "BASE_IMAGE=$LOCAL_BASE_IMAGE"
        fi
    done
fi

# ---- torch for the cpu variant: the CPU index, or a local wheel ---------------------------------------------
reachable() {  # the URL answers over HTTPS from this host (its own trust store)
    python3 - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15)
EOF
}

local_torch_wheel() {
    ls "$WHEELS"/torch-"$TORCH_VERSION"+cpu-cp311-*.whl 2>/dev/null | head -1 || true
}

prepare_torch() {
    [ "$VARIANT" = cpu ] || return 0
    if [ -n "${TORCH_WHEEL:-}" ]; then
        [ -f "$TORCH_WHEEL" ] || die "TORCH_WHEEL=$TORCH_WHEEL: no such file"
        case "$(basename "$TORCH_WHEEL")" in
            torch-"$TORCH_VERSION"+cpu-cp311-*.whl) ;;
            *) die "TORCH_WHEEL=$TORCH_WHEEL: expected torch-$TORCH_VERSION+cpu-cp311-...whl (the CPU build of the pinned version for Python 3.11)" ;;
        esac
        rm -f "$WHEELS"/torch-*.whl
        ln "$TORCH_WHEEL" "$WHEELS/" 2>/dev/null || cp "$TORCH_WHEEL" "$WHEELS/"
        note "torch from the local wheel $TORCH_WHEEL"
        return 0
    fi
    if [ -n "$(local_torch_wheel)" ]; then
        note "torch from $(local_torch_wheel)"
        return 0
    fi
    reachable "$TORCH_INDEX_URL" && return 0
    note "the CPU torch index $TORCH_INDEX_URL is unreachable from here; looking for a local torch $TORCH_VERSION+cpu wheel (pip's find-links)"
    if python3 -m pip download --quiet --no-deps --no-index --only-binary=:all: --python-version 3.11 \
           --platform manylinux_2_28_x86_64 --dest "$WHEELS" "torch==$TORCH_VERSION+cpu" >/dev/null 2>&1 \
       && [ -n "$(local_torch_wheel)" ]; then
        note "torch from $(local_torch_wheel)"
        return 0
    fi
    die "torch $TORCH_VERSION (CPU) cannot be had: the index $TORCH_INDEX_URL is unreachable and no local wheel was \
found. Set TORCH_WHEEL=/path/to/torch-$TORCH_VERSION+cpu-cp311-cp311-manylinux_2_28_x86_64.whl, or TORCH_INDEX_URL \
to an index that serves it (https://pypi.org/simple works too, but PyPI's torch is the CUDA build: several GB more)"
}

# ---- the project image: always built, so it holds this checkout (unchanged layers come from the cache) -------
prepare_torch
secret=()
ca=${CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}
if [ -n "$ca" ]; then
    if [ -f "$ca" ]; then
        secret=(--secret "id=ca,src=$ca")
        note "pip inside the build trusts the extra CA bundle $ca (a build secret, not in any layer)"
    elif [ -n "${CA_BUNDLE:-}" ]; then
        die "CA_BUNDLE=$CA_BUNDLE: no such file"
    fi
fi
previous=$(docker image inspect --format '{{.Id}}' "$PROJECT_IMAGE" 2>/dev/null) || true
build "$PROJECT_IMAGE" "$ROOT" --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VARIANT=$VARIANT" \
    --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL" ${PIP_INDEX_URL:+--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"} \
    "${secret[@]}"
# the image this build replaced, now without a name: removed, so rebuilds do not pile up (kept while in use)
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect --format '{{.Id}}' "$PROJECT_IMAGE")" ] \
   && [ "$(docker image inspect --format '{{len .RepoTags}}' "$previous" 2>/dev/null)" = 0 ]; then
    docker rmi "$previous" >/dev/null 2>&1 && note "removed the image it replaced (${previous:7:12})" || true
fi

mkdir -p "$ROOT/build"
cat >"$ROOT/build/compose-images.env" <<EOF
POPULORA_IMAGE=$POPULORA_IMAGE
POPULORA_TAG=$POPULORA_TAG
POPULORA_BASE_IMAGE=$BASE_IMAGE
POPULORA_POSTGRES_IMAGE=$POPULORA_POSTGRES_IMAGE
POPULORA_REDIS_IMAGE=$POPULORA_REDIS_IMAGE
EOF
for image in "$PROJECT_IMAGE" "$POPULORA_POSTGRES_IMAGE" "$POPULORA_REDIS_IMAGE"; do
    note "$(docker image inspect --format '{{index .RepoTags 0}} {{.Size}}' "$image" \
        | awk '{printf "%s: %.0f MB", $1, $2 / 1e6}')"
done
note "for docker-compose, add these lines to .env (also in build/compose-images.env):"
sed 's/^/    /' "$ROOT/build/compose-images.env" >&2
