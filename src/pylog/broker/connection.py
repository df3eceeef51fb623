"""One client connection: frames in, responses out, in order.

Each connection has its own thread with a blocking socket (docs/ARCHITECTURE.md, "The
broker", says why). The loop reads one size-prefixed request, answers it, and reads the
next: responses leave in request order, a client may pipeline, and a slow reader stalls
only its own thread (the kernel's socket buffer is the only buffer: back-pressure).

Defences, as Kafka's SocketServer:
- a size prefix above ``socket.request.max.bytes`` (or below a header's size) closes the
  connection at once, with one log line; a claimed size is never allocated up front, the
  frame grows only as its bytes arrive;
- a header or body that does not parse closes the connection (Kafka does the same: a
  request that cannot be parsed cannot be answered in its own format);
- an unknown API key or version gets UNSUPPORTED_VERSION where the protocol has a
  response for it (ApiVersions always answers with v0), else the connection closes;
- no request for ``connections.max.idle.ms`` closes the connection.

Responses are lists of parts: bytes go out with ``send`` (MSG_MORE when a file region
follows), file regions with sendfile(2) straight from the page cache (zero-copy fetch).
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import threading

from pylog.protocol import MalformedMessageError, decode_request, frame_response
from pylog.protocol.api import API_VERSIONS_KEY

__all__ = ["Connection"]

log = logging.getLogger("pylog.broker")

_i32 = struct.Struct(">i")
_CHUNK = 1 << 16
_UNSUPPORTED_VERSION = 35


class ConnectionClosed(Exception):
    """The peer closed the connection, or it broke."""


class Connection:
    def __init__(self, broker, sock: socket.socket, peer: tuple) -> None:
        self.broker = broker
        self.sock = sock
        self.peer = f"{peer[0]}:{peer[1]}"
        self.host = peer[0]
        self.thread = threading.Thread(target=self._run, name=f"pylog-conn-{self.peer}", daemon=True)
        self.busy = False                  # a request is being handled (graceful shutdown waits)
        self.requests = 0

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ============================================================== loop

    def _run(self) -> None:
        broker = self.broker
        try:
            self.sock.settimeout(broker.server_config["connections.max.idle.ms"] / 1000)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not broker.stopping:
                frame = self._read_frame()
                if frame is None:
                    return
                self.busy = True
                try:
                    if not self._serve(frame):
                        return
                finally:
                    self.busy = False
                self.requests += 1
        except ConnectionClosed:
            pass
        except TimeoutError:
            log.info("closing idle connection %s (connections.max.idle.ms)", self.peer)
        except OSError as exc:
            log.debug("connection %s: %s", self.peer, exc)
        except Exception:
            log.exception("connection %s: unexpected error; closing it", self.peer)
        finally:
            try:
                self.sock.close()
            finally:
                broker._forget(self)

    def _recv_exact(self, n: int, first: bool = False) -> bytearray | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), _CHUNK))
            except TimeoutError:
                if first and not buf and self.broker.stopping:
                    return None
                raise
            if not chunk:
                if first and not buf:
                    return None          # a clean close between requests
                raise ConnectionClosed()
            buf += chunk
        return buf

    def _read_frame(self) -> bytearray | None:
        head = self._recv_exact(4, first=True)
        if head is None:
            return None
        size = _i32.unpack(head)[0]
        limit = self.broker.server_config["socket.request.max.bytes"]
        if size < 8 or size > limit:
            log.warning("closing connection %s: request size %d is %s", self.peer, size,
                        f"above socket.request.max.bytes ({limit})" if size > limit
                        else "too small for a request header")
            return None
        # Grows as bytes arrive: a hostile size prefix costs nothing until sent.
        return self._recv_exact(size)

    def _serve(self, frame: bytearray) -> bool:
        """Handles one request; False closes the connection."""
        try:
            header, body, problem = decode_request(frame)
        except MalformedMessageError as exc:
            api = _i32.unpack_from(frame, 0)[0] >> 16 if len(frame) >= 4 else -1
            log.warning("closing connection %s: malformed request (api key %d): %s", self.peer, api, exc)
            return False
        if body is None:
            if header.api_key == API_VERSIONS_KEY:
                # KIP-511: an ApiVersions version we do not know gets a v0 answer with the
                # error and our ranges; the client retries with a version we speak.
                response = self.broker.api_versions_response(_UNSUPPORTED_VERSION)
                self._send(frame_response(header, response, version=0))
                return True
            log.warning("closing connection %s: %s (client %r)", self.peer, problem, header.client_id)
            return False
        response = self.broker.handle(self, header, body)
        if response is None:
            return True                  # acks=0 produce: no response
        self._send(frame_response(header, response))
        return True

    def _send(self, parts: list) -> None:
        sock = self.sock
        pending = bytearray()
        last = len(parts) - 1
        for i, part in enumerate(parts):
            if isinstance(part, (bytes, bytearray)):
                pending += part
                if i == last:
                    sock.sendall(pending)
                continue
            if pending:
                sock.sendall(pending, socket.MSG_MORE)
                pending = bytearray()
            self._send_region(part)

    def _send_region(self, region) -> None:
        """sendfile(2) of a file region. The socket is non-blocking underneath (it has a
        timeout), so a full socket buffer returns early: wait until it drains."""
        sent = 0
        timeout_ms = int(self.broker.server_config["connections.max.idle.ms"])
        poller = None
        while sent < region.size:
            sent += region.send_to(self.sock, sent)
            if sent < region.size:
                if poller is None:
                    poller = select.poll()
                    poller.register(self.sock, select.POLLOUT)
                if not poller.poll(timeout_ms):
                    raise TimeoutError("client stopped reading")
        self.broker.stats["fetch_bytes_sendfile"] += region.size
