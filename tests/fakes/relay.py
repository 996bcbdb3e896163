"""A TCP relay in front of a real server (moto, fake-gcs-server, Azurite, PostgreSQL) that a test can cut:
every connection in flight is reset and new ones are refused, as when the network to a team's store goes
away. It relays bytes only, so TLS (Azurite) and PostgreSQL's protocol pass through unchanged."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class Relay:
    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._cut = False
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True, name="relay-pump").start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """The store stops answering: new connections are refused, those open are reset."""
        with self._lock:
            self._cut = True
            conns, self._open = self._open, []
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept in flight
        self._listener.close()
        for s in conns:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closed with a reset
                s.close()
