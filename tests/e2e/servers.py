"""A Postgres and a Redis server of a test's own, on free loopback ports in a temporary directory, started from the
binaries the machine has, that the test may stop and start again (the machine's shared servers are never touched).

Postgres refuses to run as root: as root, the cluster is owned by, and every server command runs as, the `postgres`
user (the Debian package creates it). Without the binaries a test fails under CI=true and is skipped elsewhere
(`need_binaries`)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from populora.ports import free_port
from tests.conftest import IN_CI


def _postgres_bin(name: str) -> str | None:
    """`initdb`/`pg_ctl` of the newest Postgres the machine has: Debian keeps them out of PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


def need_binaries() -> None:
    """Skip locally, fail under CI=true, when the machine lacks what these servers need."""
    missing = [n for n in ("initdb", "pg_ctl") if _postgres_bin(n) is None]
    missing += [n for n in ("redis-server", "redis-cli") if shutil.which(n) is None]
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            missing.append("runuser (to run Postgres as the 'postgres' user)")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            missing.append("the 'postgres' user (Postgres will not run as root)")
    if missing:
        msg = f"cannot start a Postgres and a Redis of the test's own: missing {', '.join(missing)}"
        if IN_CI:
            pytest.fail(msg + " (CI=true: tests that need them fail rather than skip)")
        pytest.skip(msg)


class OwnPostgres:
    """A throwaway cluster (trust authentication, TCP on 127.0.0.1 only), database `populora`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="populora-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run([_postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                   "--no-sync"])
        # TCP only; no fsync: a killed server still has what it committed (the OS holds it)
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                    "fsync = off\nfull_page_writes = off\nmax_connections = 200\n")
        self.start()
        self._run(["psql" if shutil.which("psql") else _postgres_bin("psql"), "-h", "127.0.0.1", "-p",
                   str(self.port), "-U", "postgres", "-q", "-c", "CREATE DATABASE populora"])

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/populora"

    def _run(self, cmd: list[str | None], timeout: float = 120.0) -> None:
        done = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(map(str, cmd))} exited {done.returncode}: {done.stdout}{done.stderr}"
                               f"\n{tail}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections (after crash recovery, when it was killed)."""
        self._run([_postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", "start"],
                  timeout=150)

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; `immediate` ends every backend at once, without a checkpoint, as a crash would (what
        was committed is kept: the write-ahead log is replayed at the next start)."""
        self._run([_postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"], timeout=90)

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def close(self) -> None:
        if self.running():
            try:
                self.stop()
            except RuntimeError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class OwnRedis:
    """A Redis with an append-only file, as the deployment runs it (docker-compose.yml): the step streams and their
    pending entries survive a restart; with `persistent=False` a restart finds it empty."""

    def __init__(self, persistent: bool = True) -> None:
        self.persistent = persistent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="populora-redis-"))
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes" if self.persistent else "no", "--save", "", "--logfile",
             str(self.dir / "server.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            ping = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "server.log").read_text()[-2000:] if (self.dir / "server.log").exists() else ""
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill the server (SIGKILL: no chance to save; what it acknowledged is in the append-only file)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
