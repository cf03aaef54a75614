# Sourced by scripts/images.sh (which scripts/test_compose.py runs): a running Docker daemon (started
# here when it is not running and we are root), a BuildKit-capable build command, and the image names of the
# stack. Sourced, not run; every failure ends the caller with a message that says what to do.

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
DAEMON_JSON="$ROOT/deploy/docker/daemon.json"
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/populora-dockerd.log}

die() { echo "error: $*" >&2; exit 1; }
note() { echo "[images] $*" >&2; }

# The Docker client and a daemon that answers. Starts dockerd when it is installed, not running, and we are root,
# with /etc/docker/daemon.json when the machine has one, else with deploy/docker/daemon.json (gVisor's runsc
# registered as the runtime `runsc`).
ensure_docker() {
    command -v docker >/dev/null \
        || die "Docker is not installed: install Debian's docker.io package (apt-get install docker.io) or Docker Engine"
    docker info >/dev/null 2>&1 && return 0
    local why
    why=$(docker info 2>&1 >/dev/null | tail -1) || true
    if [ "$(id -u)" != 0 ]; then
        if [ -S /var/run/docker.sock ]; then
            die "the Docker daemon does not answer ($why): run this as root or as a member of the docker group"
        fi
        die "the Docker daemon is not running and only root can start it ($why): run this as root, or start dockerd first"
    fi
    command -v dockerd >/dev/null || die "the Docker daemon is not running and dockerd is not installed (apt-get install docker.io)"
    local args=()
    if [ -f /etc/docker/daemon.json ]; then
        note "starting dockerd (configuration /etc/docker/daemon.json; log $DOCKERD_LOG)"
    else
        note "starting dockerd (configuration $DAEMON_JSON; log $DOCKERD_LOG)"
        args=(--config-file "$DAEMON_JSON")
    fi
    setsid dockerd "${args[@]}" >>"$DOCKERD_LOG" 2>&1 </dev/null &
    local i
    for i in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 $! 2>/dev/null || die "dockerd exited at start; see $DOCKERD_LOG: $(tail -3 "$DOCKERD_LOG")"
        sleep 1
    done
    die "dockerd did not answer within 60 s; see $DOCKERD_LOG"
}

# BUILD: the command line that builds with BuildKit (secret and cache mounts). buildx when installed; otherwise
# a Docker client of version 20 to 22, whose `docker build` has BuildKit built in (DOCKER_BUILDKIT=1). A newer
# client without buildx is skipped in favour of an older one further down PATH (Debian's docker.io ships one).
BUILD=()
find_builder() {
    local c version
    if docker buildx version >/dev/null 2>&1; then
        BUILD=(docker buildx build --load)
        return 0
    fi
    for c in $(type -ap docker); do
        [ -x "$c" ] || continue
        version=$("$c" version --format '{{.Client.Version}}' 2>/dev/null) || true
        case "$version" in
            19.03*|20.*|21.*|22.*) BUILD=(env DOCKER_BUILDKIT=1 "$c" build); return 0 ;;
        esac
    done
    die "building the images needs BuildKit: install Docker's buildx plugin (package docker-buildx-plugin or \
docker-buildx), or use a Docker client of version 20 to 22 (Debian bookworm's docker.io)"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Present here, or pulled now; false when neither (no registry reachable, unknown name).
image_available() {
    image_exists "$1" && return 0
    note "pulling $1"
    timeout 300 docker pull -q "$1" >/dev/null 2>&1
}

# The stack's image names. LOCAL_BASE=1: a base image from Debian's mirror and Postgres and Redis images built on
# it; 0: the public python, postgres and redis images (pulled when missing); auto (default): public ones when all
# three are here or can be pulled, else the local ones.
VARIANT=${VARIANT:-cpu}
POPULORA_IMAGE=${POPULORA_IMAGE:-ghcr.io/populora/populora}
POPULORA_TAG=${POPULORA_TAG:-0.1.0}
PROJECT_IMAGE="$POPULORA_IMAGE:$POPULORA_TAG-$VARIANT"
LOCAL_BASE_IMAGE=populora/base:bookworm
LOCAL_POSTGRES_IMAGE=populora/postgres:15-bookworm
LOCAL_REDIS_IMAGE=populora/redis:7-bookworm
PUBLIC_BASE_IMAGE=python:3.11-slim-bookworm
PUBLIC_POSTGRES_IMAGE=postgres:16-bookworm
PUBLIC_REDIS_IMAGE=redis:7-bookworm

resolve_images() {
    case "${LOCAL_BASE:-auto}" in
        1|yes|true) LOCAL_BASE=1 ;;
        0|no|false)
            LOCAL_BASE=0
            local img
            for img in "${BASE_IMAGE:-$PUBLIC_BASE_IMAGE}" "${POPULORA_POSTGRES_IMAGE:-$PUBLIC_POSTGRES_IMAGE}" \
                       "${POPULORA_REDIS_IMAGE:-$PUBLIC_REDIS_IMAGE}"; do
                image_available "$img" || die "the image $img is not on this machine and cannot be pulled (no \
registry reachable, or an unknown name): build the stack from Debian's mirror with LOCAL_BASE=1, or name an image \
this machine has with BASE_IMAGE / POPULORA_POSTGRES_IMAGE / POPULORA_REDIS_IMAGE"
            done ;;
        auto)
            if image_available "${BASE_IMAGE:-$PUBLIC_BASE_IMAGE}" \
               && image_available "${POPULORA_POSTGRES_IMAGE:-$PUBLIC_POSTGRES_IMAGE}" \
               && image_available "${POPULORA_REDIS_IMAGE:-$PUBLIC_REDIS_IMAGE}"; then
                LOCAL_BASE=0
            else
                note "the public base images are not here and cannot be pulled: building the stack on a base from Debian's mirror (LOCAL_BASE=1)"
                LOCAL_BASE=1
            fi ;;
        *) die "LOCAL_BASE must be 1, 0 or auto, not '$LOCAL_BASE'" ;;
    esac
    if [ "$LOCAL_BASE" = 1 ]; then
        BASE_IMAGE=$LOCAL_BASE_IMAGE
        POPULORA_POSTGRES_IMAGE=$LOCAL_POSTGRES_IMAGE
        POPULORA_REDIS_IMAGE=$LOCAL_REDIS_IMAGE
    else
        BASE_IMAGE=${BASE_IMAGE:-$PUBLIC_BASE_IMAGE}
        POPULORA_POSTGRES_IMAGE=${POPULORA_POSTGRES_IMAGE:-$PUBLIC_POSTGRES_IMAGE}
        POPULORA_REDIS_IMAGE=${POPULORA_REDIS_IMAGE:-$PUBLIC_REDIS_IMAGE}
    fi
}
