"""The league's REST app on uvicorn: serving the dashboard beside a run, or over a finished run's database; the
tests' real server."""

from __future__ import annotations

import threading
import time
from pathlib import Path as FilePath
from typing import TYPE_CHECKING

from services.league.rest_app import create_app
from services.league.service import LeagueService

if TYPE_CHECKING:
    from populora.access import Access
    from populora.config import Config
    from populora.tls import TlsFiles


class LeagueRestServer:
    """The league's REST app on uvicorn, read-only by default: in the foreground (`populora dashboard`) or in a
    thread beside an embedded run (`populora train --dashboard`)."""

    def __init__(self, service: LeagueService, host: str = "127.0.0.1", port: int = 8080, read_only: bool = True,
                 tls: TlsFiles | None = None, access: Access | None = None):
        import uvicorn

        from populora.tls import uvicorn_ssl

        self.service = service
        config = uvicorn.Config(create_app(service, read_only=read_only, access=access), host=host, port=port, log_level="warning",
                                access_log=False, **(uvicorn_ssl(tls) if tls else {}))
        self.server = uvicorn.Server(config)
        self.url = f"{'https' if tls else 'http'}://{host}:{port}/"
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        self.server.run()

    def start(self) -> LeagueRestServer:
        """Serve in a daemon thread; returns once the socket listens (or raises if it could not bind)."""
        self._thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive():
                raise OSError(f"the dashboard could not listen on {self.url}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the dashboard did not start on {self.url} within 30 s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.service.close()


def dashboard_server(cfg: Config, host: str = "127.0.0.1", port: int = 8080,
                     existing: bool = True, insecure: bool = False) -> LeagueRestServer:
    """The read-only dashboard over the run database `cfg` names (`league.db_url`: the embedded SQLite file under
    `run.output_dir`, or the distributed Postgres). With `existing`, a SQLite file that is not there is an error
    rather than a new empty database. HTTPS with the dashboard's certificate where services.tls is on; plaintext on
    a non-loopback address only when `insecure` (or services.tls.insecure). Its reads are open only on plaintext
    without scoped tokens; with either, they need a reader's credential (a client certificate, or a token whose
    verifier services.tokens_path holds). It reads through league.read_db_url where that is set (a database role
    that cannot write)."""
    from populora.access import Access
    from populora.config import ConfigError
    from populora.tls import check_bind, tls_files

    tls = tls_files(cfg.services.tls, "dashboard")
    check_bind("dashboard", host, tls, insecure or cfg.services.tls.insecure, what="HTTP")

    url = cfg.resolve(cfg.league.read_db_url or cfg.league.db_url) if existing else cfg.league_db_url
    if existing and url.startswith("sqlite:///") and not FilePath(url[len("sqlite:///"):]).exists():
        raise ConfigError(f"no run database at {url[len('sqlite:///'):]}: point --set run.output_dir=DIR at the "
                          "directory `populora train` wrote to, or --set league.db_url=URL at its database")
    access = Access.from_config(cfg.services, tls is not None, server="dashboard")
    service = LeagueService.from_config(cfg, url, migrate=not (existing and cfg.league.read_db_url))
    return LeagueRestServer(service, host, port, tls=tls, access=access)

