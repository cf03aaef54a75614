"""scripts/apt_packages.sh, what `make install` and `make test-compose` run first: which Debian packages are missing
(a package is missing when its command is not on PATH), installing them as root non-interactively, naming them
otherwise. Runs the real script with a PATH of stand-ins (`id`, `apt-get`), so nothing is installed here."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.deploy.deployment import ROOT

SCRIPT = ROOT / "scripts" / "apt_packages.sh"
COMPOSE = ["bwrap:bubblewrap", "docker:docker.io", "dockerd:docker.io", "debootstrap:debootstrap", "runsc:runsc"]
# apt-get's stand-in: logs "<DEBIAN_FRONTEND> <args>", and `install` puts each package's commands on PATH
FAKE_APT_GET = """#!/bin/bash
echo "$DEBIAN_FRONTEND $*" >> "$APT_LOG"
[ "$1" = install ] || exit 0
for pkg in "$@"; do
  case "$pkg" in
    docker.io) cmds="docker dockerd" ;;
    debootstrap) cmds="$FAKE_PROVIDES" ;;
    -*) cmds="" ;;
    *) cmds="$pkg" ;;
  esac
  for c in $cmds; do printf '#!/bin/sh\\n' > "$FAKE_BIN/$c"; /bin/chmod +x "$FAKE_BIN/$c"; done
done
"""


def run(tmp_path: Path, have: list[str], pairs: list[str], uid: int = 0, provides: str = "debootstrap",
        **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The script with PATH holding only stand-ins: the commands `have`, `id -u` answering `uid`, and apt-get."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in have:
        (fake / name).write_text("#!/bin/sh\n")
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "apt-get").write_text(FAKE_APT_GET)
    for f in fake.iterdir():
        f.chmod(0o755)
    log = tmp_path / "apt.log"
    log.touch()
    out = subprocess.run(["/bin/bash", str(SCRIPT), *pairs], capture_output=True, text=True, timeout=60,
                         env={"PATH": str(fake), "APT_LOG": str(log), "FAKE_BIN": str(fake),
                              "FAKE_PROVIDES": provides, **env})
    return out, log.read_text().splitlines()


def test_missing_packages_are_those_whose_command_is_not_on_path(tmp_path):
    out, calls = run(tmp_path, ["bwrap", "docker"], COMPOSE, APT_DRY_RUN="1")
    # docker.io once: its `docker` is there but `dockerd` is not
    assert (out.returncode, out.stdout, calls) == (0, "docker.io debootstrap runsc\n", []), out.stderr


def test_nothing_missing_installs_nothing(tmp_path):
    out, calls = run(tmp_path, ["bwrap", "docker", "dockerd", "debootstrap", "runsc"], COMPOSE)
    assert (out.returncode, out.stdout, out.stderr, calls) == (0, "", "", [])


def test_root_installs_the_missing_packages_non_interactively(tmp_path):
    out, calls = run(tmp_path, ["bwrap", "runsc"], COMPOSE)
    assert out.returncode == 0, out.stderr
    assert calls == ["noninteractive update -qq", "noninteractive install -y -qq docker.io debootstrap"]
    assert "installing Debian packages: docker.io debootstrap" in out.stderr
    assert all((tmp_path / "bin" / c).exists() for c in ("docker", "dockerd", "debootstrap"))


def test_a_package_that_does_not_bring_its_command_fails(tmp_path):
    out, calls = run(tmp_path, ["bwrap", "docker", "dockerd", "runsc"], COMPOSE, provides="")
    assert out.returncode == 1 and calls[-1] == "noninteractive install -y -qq debootstrap"
    assert "installed debootstrap, but `debootstrap` is still not on PATH" in out.stderr, out.stderr


def test_not_root_names_the_packages_and_installs_nothing(tmp_path):
    out, calls = run(tmp_path, ["bwrap", "runsc"], COMPOSE, uid=1000)
    assert out.returncode == 0 and calls == []
    assert "missing Debian packages: docker.io debootstrap" in out.stderr
    assert "apt-get install -y docker.io debootstrap" in out.stderr


def test_a_malformed_pair_is_refused(tmp_path):
    out, calls = run(tmp_path, [], ["debootstrap"])
    assert out.returncode == 2 and "'debootstrap' is not COMMAND:PACKAGE" in out.stderr and calls == []


def test_make_test_compose_installs_docker_and_debootstrap_first():
    """`make test-compose` runs the script with Docker's client and daemon and debootstrap before the stack."""
    plan = subprocess.run(["make", "-n", "--no-print-directory", "test-compose"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60).stdout.splitlines()
    apt = [i for i, line in enumerate(plan) if "scripts/apt_packages.sh" in line
           and {"docker:docker.io", "dockerd:docker.io", "debootstrap:debootstrap", "runsc:runsc"} <= set(line.split())]
    stack = [i for i, line in enumerate(plan) if "scripts/test_compose.py" in line]
    assert apt and stack and apt[0] < stack[0], "\n".join(plan)
