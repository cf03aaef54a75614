"""A TCP proxy in front of one service process, whose open connections a fault can cut in the middle of a call.

bench.faults puts one in front of every service replica and gives the cluster's config the proxies' ports, so every
call the coordinator, the workers and the services make to one another goes through one. `cut()` closes every
connection the proxy holds at that moment, both ways, with an RST where the OS allows: to the caller an RPC in
flight ends as a dropped connection (gRPC UNAVAILABLE), which its retry or the phase's redelivery must absorb."""

from __future__ import annotations

import socket
import struct
import threading

from populora.ports import free_port

CHUNK = 65536


class FaultProxy:
    """Listens on 127.0.0.1:`port` (a free one by default) and forwards each connection to 127.0.0.1:`target`."""

    def __init__(self, target: int, port: int | None = None):
        self.target = target
        self.port = port or free_port()
        self._server = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._closed = False
        self.connections = 0  # accepted since the start
        self.cuts = 0  # connections cut by cut()
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                upstream.settimeout(None)
            except OSError:  # the process behind is down: the caller sees a refused call, as without the proxy
                _reset(client)
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst, pair), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, pair) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(pair)

    def _drop(self, pair) -> None:
        with self._lock:
            if pair not in self._pairs:
                return
            self._pairs.discard(pair)
        for s in pair:
            _reset(s)

    def open(self) -> int:
        """How many connections pass through now."""
        with self._lock:
            return len(self._pairs)

    def cut(self) -> int:
        """Cut every connection passing through now; how many."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair)
        self.cuts += len(pairs)
        return len(pairs)

    def close(self) -> None:
        self._closed = True
        try:
            self._server.close()
        except OSError:
            pass
        self.cut()


def _reset(s: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0): the peer sees the connection reset, not a clean end of stream. SHUT_RD first
    wakes this proxy's own thread blocked reading the socket (close alone would not) and sends the peer nothing."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
