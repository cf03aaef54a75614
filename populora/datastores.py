"""TLS to the data stores: the certificate files a Postgres URL names (`sslrootcert`, `sslcert`, `sslkey`) checked
to exist before a connection is tried, and a Redis client for a `rediss://` URL that checks the server against a CA
and presents a client certificate, with the ACL users of a deployment's Redis (who may run which commands on which
keys).

Postgres takes its TLS settings in the URL itself (libpq's parameters, passed on by SQLAlchemy and psycopg):
`postgresql+psycopg://USER:PASSWORD@postgres:5432/DB?sslmode=verify-full&sslrootcert=/run/secrets/ca.pem`. Redis takes
them from `queue.redis_ca`, `redis_cert` and `redis_key`, or, where those are empty and `services.tls` is on, from the
process's own mutual-TLS files (the CA, and the certificate of its identity). Plaintext URLs (`redis://`, a URL
without `sslmode`) connect as before: the local defaults and the tests use them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from populora.config.base import ConfigError

# libpq's URL parameters that name a file
PG_FILE_PARAMS = {"sslrootcert": "the CA certificate", "sslcert": "the client certificate", "sslkey": "the client key"}

# The ACL users of a deployment's Redis. `default` is off: every connection authenticates as one of these (and, with
# `--tls-auth-clients yes`, presents a certificate of the deployment's CA first). The coordinator, the one process that
# uses Redis (the step queue, coordinator/run/queue.py), may run stream commands (and DEL, PING) on `populora:*` keys
# only; the health check may only PING.
REDIS_KEY_PATTERN = "populora:*"
REDIS_COMMANDS = {
    "coordinator": "-@all +@stream +del +ping",
    "health": "-@all +ping",
}


def check_db_url(url: str, what: str = "league.db_url") -> None:
    """ConfigError when the URL names a certificate or key file (sslrootcert, sslcert, sslkey) that is not there, or
    asks libpq to check the server's certificate (sslmode verify-ca / verify-full) without naming the CA."""
    if not url.startswith("postgresql"):
        return
    import sqlalchemy as sa

    try:
        query = sa.engine.make_url(url).query
    except sa.exc.ArgumentError:
        return  # SQLAlchemy says what is wrong with it when it connects
    for param, name in PG_FILE_PARAMS.items():
        given = query.get(param)
        if isinstance(given, tuple):
            given = given[-1]
        if given and not Path(given).is_file():
            raise ConfigError(f"{what}: {name} {param}={given} does not exist; mount it there (the compose files and "
                              "the Kubernetes manifests mount the CA at /run/secrets/ca.pem) or fix the path")
    mode = query.get("sslmode")
    if mode in ("verify-ca", "verify-full") and not query.get("sslrootcert"):
        raise ConfigError(f"{what}: sslmode={mode} needs sslrootcert=PATH, the CA certificate the database's "
                          "certificate is checked against")


def redis_tls(cfg) -> dict[str, str]:
    """The files a Redis client of `cfg` uses for a `rediss://` URL: {"ca", "cert", "key"} from queue.redis_ca /
    redis_cert / redis_key, each empty one taken from services.tls (this process's identity) when that is on."""
    q = cfg.queue
    files = {"ca": q.redis_ca, "cert": q.redis_cert, "key": q.redis_key}
    if not all(files.values()) and cfg.services.tls.enabled:
        from populora.tls import tls_files

        own = tls_files(cfg.services.tls)
        defaults = {"ca": str(own.ca), "cert": str(own.cert), "key": str(own.key)}
        files = {k: v or defaults[k] for k, v in files.items()}
    return {k: v for k, v in files.items() if v}


def redis_client(url: str, ca: str = "", cert: str = "", key: str = "") -> Any:
    """A redis.Redis for `url`. A `rediss://` URL needs the CA (`ca`) that signed the server's certificate, whose
    name must match the URL's host; `cert` and `key` are the client's certificate and key (a server with
    `--tls-auth-clients yes` requires them). ConfigError for a missing file, or files given for a plaintext URL."""
    import redis

    given = {"queue.redis_ca": ca, "queue.redis_cert": cert, "queue.redis_key": key}
    if not url.startswith("rediss://"):
        if url.startswith("redis://") and any(given.values()):
            named = ", ".join(k for k, v in given.items() if v)
            raise ConfigError(f"queue.redis_url {_no_password(url)} is plaintext (redis://) but {named} is set: use "
                              "rediss:// to connect with TLS")
        return redis.Redis.from_url(url)
    if not ca:
        raise ConfigError(f"queue.redis_url {_no_password(url)} asks for TLS (rediss://): set queue.redis_ca to the "
                          "CA certificate of the Redis server's certificate (or turn on services.tls, whose CA is "
                          "then used)")
    if bool(cert) != bool(key):
        raise ConfigError("queue.redis_cert and queue.redis_key go together: give both or neither")
    for field, path in given.items():
        if path and not Path(path).is_file():
            raise ConfigError(f"{field}: {path} does not exist (queue.redis_url {_no_password(url)} is rediss://); "
                              "`populora certs` writes a CA and certificates, or point the field at your own")
    return redis.Redis.from_url(url, ssl_ca_certs=ca, ssl_certfile=cert or None, ssl_keyfile=key or None,
                                ssl_cert_reqs="required", ssl_check_hostname=True)


def _no_password(url: str) -> str:
    """The URL with its password (if any) replaced by ***, for messages."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


def redis_acl(passwords: dict[str, str]) -> str:
    """The ACL file (`--aclfile`) of a deployment's Redis: the default user off, each user of REDIS_COMMANDS on with
    its commands, and a password hash (SHA-256) for every user `passwords` names (the others take any password:
    `nopass`, for the health check's PING). KeyError for a user REDIS_COMMANDS does not know."""
    unknown = sorted(set(passwords) - set(REDIS_COMMANDS))
    if unknown:
        raise KeyError(f"no Redis user {unknown}; the users are {sorted(REDIS_COMMANDS)}")
    lines = ["user default off resetkeys resetchannels -@all"]
    for user, commands in REDIS_COMMANDS.items():
        secret = passwords.get(user)
        auth = f"#{hashlib.sha256(secret.encode()).hexdigest()}" if secret else "nopass"
        keys = f"~{REDIS_KEY_PATTERN}" if "+@" in commands or "+del" in commands else ""
        lines.append(" ".join(p for p in ("user", user, "on", auth, "resetkeys", keys, "resetchannels", commands)
                              if p))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # `python -m populora.datastores < password > users.acl`: the coordinator's on stdin
    import sys

    password = sys.stdin.readline().strip()
    if not password:
        sys.exit("usage: printf %s \"$REDIS_PASSWORD\" | python -m populora.datastores > users.acl (the coordinator's "
                 "Redis password on stdin)")
    print(redis_acl({"coordinator": password}), end="")
