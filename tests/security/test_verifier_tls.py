"""An external verifier under mutual TLS: the sandbox reaches it over HTTPS only, presents its own certificate, and
takes verdicts only from a server the deployment's CA certified as the identity `verifier`, and only for the attempts
it sent. Each refusal gives verifier_error (excluded from rewards) and no verdict."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from populora import certs
from populora.tasks import Triplet
from populora.tasks.verify import Attempt
from populora.tls import TlsFiles
from services.sandbox.external import ExternalVerifiers

TASK = Triplet("code_o", "def f(x):\n    return x", ["1"], ["1"])


class _Verifier(BaseHTTPRequestHandler):
    seen: list = []  # (client certificate's common name, attempt ids) per call
    extra = False  # answer for an attempt it was not sent as well

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        peer = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") else None
        names = [v for rdn in (peer or {}).get("subject", ()) for k, v in rdn if k == "commonName"]
        type(self).seen.append((names, [a["attempt_id"] for a in body["attempts"]]))
        results = [{"attempt_id": a["attempt_id"], "outcome": "correct" if "YES" in a["response_text"] else "wrong"}
                   for a in body["attempts"]]
        if self.extra:
            results.append({"attempt_id": "someone-else", "outcome": "correct"})
        data = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def files(folder, name: str) -> TlsFiles:
    return TlsFiles(name, certs.ca_file(folder), certs.cert_file(folder, name), certs.key_file(folder, name))


@pytest.fixture
def pki(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    certs.write_certs(ours, ["sandbox", "verifier", "league"], days=1, hosts=["127.0.0.1"])
    certs.write_certs(theirs, ["verifier"], days=1, hosts=["127.0.0.1"])
    return ours, theirs


@pytest.fixture
def serve():
    servers = []

    def start(server_files: TlsFiles | None) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Verifier)
        scheme = "http"
        if server_files is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(server_files.ca))
            context.load_cert_chain(str(server_files.cert), str(server_files.key))
            context.verify_mode = ssl.CERT_REQUIRED  # the verifier checks the sandbox's certificate too
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        _Verifier.seen, _Verifier.extra = [], False
        return f"{scheme}://127.0.0.1:{server.server_address[1]}/check"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def attempts() -> list[Attempt]:
    return [Attempt("a1", TASK, "YES"), Attempt("a2", TASK, "no")]


def test_a_verifier_certified_by_the_ca_gives_verdicts_and_sees_the_sandbox(pki, serve):
    ours, _ = pki
    url = serve(files(ours, "verifier"))
    external = ExternalVerifiers(2.0, 0, 5, 30.0, tls=files(ours, "sandbox"))
    try:
        got = external.check("ext", url, "code_o", attempts())
    finally:
        external.close()
    assert [(c.attempt_id, c.outcome) for c in got] == [("a1", "correct"), ("a2", "wrong")]
    assert _Verifier.seen == [(["sandbox"], ["a1", "a2"])]


@pytest.mark.parametrize("case", ["other identity", "other ca", "plain http"])
def test_a_server_without_the_verifier_credential_gives_no_verdict(pki, serve, case):
    ours, theirs = pki
    server_files = {"other identity": files(ours, "league"), "other ca": files(theirs, "verifier"),
                    "plain http": None}[case]
    url = serve(server_files)
    external = ExternalVerifiers(2.0, 1, 5, 30.0, tls=files(ours, "sandbox"))
    try:
        got = external.check("ext", url, "code_o", attempts())
    finally:
        external.close()
    assert {c.outcome for c in got} == {"verifier_error"}
    detail = got[0].detail
    assert {"other identity": "identity 'verifier'", "other ca": "CERTIFICATE_VERIFY_FAILED",
            "plain http": "not https"}[case] in detail
    if case == "plain http":
        assert _Verifier.seen == []  # nothing was sent in the clear


def test_verdicts_for_attempts_it_was_not_sent_are_refused(pki, serve):
    ours, _ = pki
    url = serve(files(ours, "verifier"))
    _Verifier.extra = True
    external = ExternalVerifiers(2.0, 0, 5, 30.0, tls=files(ours, "sandbox"))
    try:
        got = external.check("ext", url, "code_o", attempts())
    finally:
        external.close()
    assert {c.outcome for c in got} == {"verifier_error"} and "not sent" in got[0].detail


def test_renewed_files_are_taken_without_a_restart(pki, serve, tmp_path):
    ours, _ = pki
    url = serve(files(ours, "verifier"))
    external = ExternalVerifiers(2.0, 0, 5, 30.0, tls=files(ours, "sandbox"))
    try:
        first = external._current()
        assert external.check("ext", url, "code_o", attempts())[0].outcome == "correct"
        certs.write_certs(ours, ["sandbox"], days=1, hosts=["127.0.0.1"])  # a new certificate and key
        assert external.check("ext", url, "code_o", attempts())[0].outcome == "correct"
        assert external._current() is not first
    finally:
        external.close()
