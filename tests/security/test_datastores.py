"""TLS to the data stores (populora.datastores): a real redis-server with TLS only (`--port 0`), client certificates
required and the deployment's ACL users, used by the step queue over `rediss://`; plaintext, an unknown certificate,
the default user and keys or commands outside the coordinator's ACL refused. And the checks of a Postgres URL's
certificate files, and of the queue's TLS settings, before anything connects."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis

from coordinator.run.queue import PhaseJob, RedisStreamQueue
from populora import certs
from populora.config import ConfigError, load_config
from populora.datastores import check_db_url, redis_acl, redis_client, redis_tls
from populora.ports import free_port

PASSWORD = "coordinator-secret"


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory):
    """A redis-server on a free loopback port, TLS only, with the deployment's ACL file; (port, certificate dir)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed (Debian's redis-server package: `apt-get install redis-server`)")
    d = tmp_path_factory.mktemp("redis-tls")
    certs.write_certs(d, ["coordinator", "league"], days=1)
    certs.write_certs(d, ["redis"], days=1, hosts=["localhost"])  # the name the clients here connect to
    (d / "users.acl").write_text(redis_acl({"coordinator": PASSWORD}))
    port = free_port()
    proc = subprocess.Popen([server, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                             "--tls-cert-file", str(d / "redis.pem"), "--tls-key-file", str(d / "redis-key.pem"),
                             "--tls-ca-cert-file", str(d / "ca.pem"), "--tls-auth-clients", "yes",
                             "--aclfile", str(d / "users.acl"), "--save", "", "--appendonly", "no", "--dir", str(d)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _client(port, d).ping()
                break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"redis-server with TLS did not start (exit {proc.poll()})")
                time.sleep(0.2)
        yield port, d
    finally:
        proc.terminate()
        proc.wait(10)


def _url(port: int, user: str = "coordinator", password: str = PASSWORD, host: str = "localhost") -> str:
    return f"rediss://{user}:{password}@{host}:{port}/0"


def _client(port: int, d: Path, identity: str = "coordinator", **kw) -> redis.Redis:
    return redis_client(_url(port, **kw), str(d / "ca.pem"), str(d / f"{identity}.pem"), str(d / f"{identity}-key.pem"))


def test_the_step_queue_works_over_tls_as_the_coordinator(tls_redis):
    port, d = tls_redis
    tls = {"ca": str(d / "ca.pem"), "cert": str(d / "coordinator.pem"), "key": str(d / "coordinator-key.pem")}
    q = RedisStreamQueue(_url(port), "tls-run", tls=tls)
    try:
        q.discard_earlier()
        q.publish(PhaseJob(run_id="tls-run", step=1, phase="propose"))
        assert q.depth() == 1
        got = q.consume("w1", block_ms=100)
        assert got is not None and got.job.phase == "propose"
        q.ack(got)
        assert q.depth() == 0
        assert q.discard_earlier() == 1  # the acknowledged entry, then the stream made again (DEL)
    finally:
        q.close()


def test_plaintext_and_strangers_are_refused(tls_redis, tmp_path):
    port, d = tls_redis
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis(host="127.0.0.1", port=port, socket_timeout=5).ping()  # no TLS
    no_cert = redis.Redis.from_url(_url(port), ssl_ca_certs=str(d / "ca.pem"), socket_timeout=5)
    with pytest.raises(redis.exceptions.ConnectionError):
        no_cert.ping()  # TLS without a client certificate (--tls-auth-clients yes)
    other = certs.write_certs(tmp_path, ["coordinator"], days=1)  # a certificate of another CA
    assert other
    stranger = redis.Redis.from_url(_url(port), ssl_ca_certs=str(d / "ca.pem"), ssl_certfile=str(tmp_path / "coordinator.pem"),
                                    ssl_keyfile=str(tmp_path / "coordinator-key.pem"), socket_timeout=5)
    with pytest.raises(redis.exceptions.ConnectionError):
        stranger.ping()
    with pytest.raises(redis.exceptions.ConnectionError):  # the server's name is checked: not 127.0.0.1
        _client(port, d, host="127.0.0.1").ping()


def test_acl_users_get_only_their_commands_and_keys(tls_redis):
    port, d = tls_redis
    with pytest.raises(redis.exceptions.AuthenticationError):
        _client(port, d, password="wrong").ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        _client(port, d, user="default", password="").ping()
    health = _client(port, d, user="health", password="anything")
    assert health.ping()
    with pytest.raises(redis.exceptions.NoPermissionError):
        health.xlen("populora:steps:x")
    coordinator = _client(port, d)
    assert coordinator.xlen("populora:steps:x") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        coordinator.xadd("other:stream", {"a": "b"})  # a key outside populora:*
    with pytest.raises(redis.exceptions.NoPermissionError):
        coordinator.set("populora:plain", "x")  # not a stream command
    with pytest.raises(redis.exceptions.NoPermissionError):
        coordinator.config_get("*")


def test_acl_file_hashes_the_password():
    text = redis_acl({"coordinator": PASSWORD})
    assert PASSWORD not in text and "user default off" in text
    assert "user health on nopass" in text
    with pytest.raises(KeyError):
        redis_acl({"league": "x"})


def test_redis_settings_are_checked_before_connecting(tmp_path):
    with pytest.raises(ConfigError, match="queue.redis_ca"):
        redis_client("rediss://coordinator:pw@redis:6379/0")
    with pytest.raises(ConfigError, match="does not exist"):
        redis_client("rediss://redis:6379/0", ca=str(tmp_path / "nope.pem"))
    with pytest.raises(ConfigError, match="rediss://"):
        redis_client("redis://redis:6379/0", ca=str(tmp_path / "ca.pem"))
    with pytest.raises(ConfigError, match="go together"):
        redis_client("rediss://redis:6379/0", ca=__file__, cert=__file__)
    with pytest.raises(ConfigError) as e:
        redis_client("rediss://coordinator:hunter2@redis:6379/0")
    assert "hunter2" not in str(e.value)
    redis_client("redis://127.0.0.1:6379/0")  # the local default: plaintext, nothing to check


def test_redis_files_default_to_the_processes_own_tls_files(tmp_path):
    certs.write_certs(tmp_path, ["coordinator"], days=1)
    cfg = load_config(overrides=["queue.redis_url=rediss://coordinator@redis:6379/0", "services.tls.enabled=true",
                                 f"services.tls.dir={tmp_path}"])
    assert redis_tls(cfg) == {"ca": str(tmp_path / "ca.pem"), "cert": str(tmp_path / "coordinator.pem"),
                              "key": str(tmp_path / "coordinator-key.pem")}
    cfg = load_config(overrides=["queue.redis_ca=/etc/ca.pem"])
    assert redis_tls(cfg) == {"ca": "/etc/ca.pem"}


def test_postgres_url_files_are_checked(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    base = "postgresql+psycopg://populora:pw@postgres:5432/populora"
    check_db_url(base)
    check_db_url("sqlite:///x.db")
    check_db_url(f"{base}?sslmode=verify-full&sslrootcert={ca}")
    with pytest.raises(ConfigError, match="sslrootcert=.*does not exist"):
        check_db_url(f"{base}?sslmode=verify-full&sslrootcert={tmp_path / 'missing.pem'}")
    with pytest.raises(ConfigError, match="needs sslrootcert"):
        check_db_url(f"{base}?sslmode=verify-full")
    with pytest.raises(ConfigError, match="sandbox.db_url"):
        check_db_url(f"{base}?sslkey=/nope", "sandbox.db_url")
