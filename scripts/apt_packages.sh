#!/usr/bin/env bash
# The Debian packages a make target needs (`make apt`, `make apt-compose`), installed when missing. Each argument is
# COMMAND:PACKAGE, the package that provides the command; a package is missing when its command is not on PATH.
# As root the missing ones are installed (apt-get update, then apt-get install -y, non-interactive) and their
# commands checked; otherwise they are named with the command that installs them, and nothing fails here (the
# target that needs one says so when it gets there).
#   APT_DRY_RUN=1   print the missing packages (one line, space-separated) and install nothing
set -euo pipefail

missing=()
for pair in "$@"; do
    case "$pair" in *:?*) ;; *) echo "error: '$pair' is not COMMAND:PACKAGE" >&2; exit 2 ;; esac
    command -v "${pair%%:*}" >/dev/null 2>&1 && continue
    case " ${missing[*]-} " in *" ${pair#*:} "*) ;; *) missing+=("${pair#*:}") ;; esac
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ -n "${APT_DRY_RUN:-}" ]; then
    echo "${missing[*]}"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "warning: missing Debian packages: ${missing[*]} (not root, so not installed; as root:" \
         "apt-get install -y ${missing[*]})" >&2
    exit 0
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 \
        || { echo "error: installed ${pair#*:}, but \`${pair%%:*}\` is still not on PATH ($PATH)" >&2; exit 1; }
done
