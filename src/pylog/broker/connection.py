"""One client connection on the broker's event loop: frames in, responses out, in order.

The loop reads one size-prefixed request, answers it, and reads the next: responses
leave in request order, a client may pipeline, and a slow reader stalls only its own
coroutine (``drain`` waits for the socket: back-pressure, no response queue grows).
Handlers that may block on the disk (an fsync for acks=all, file creation, an offset
commit) run in a thread pool; the rest run on the loop, waiting ones as coroutines
(docs/ARCHITECTURE.md, "The broker", says why).

Defences, as Kafka's SocketServer:
- a size prefix above ``socket.request.max.bytes`` (or below a header's size) closes the
  connection at once, with one log line; a claimed size is never allocated up front, the
  frame grows only as its bytes arrive;
- a header or body that does not parse closes the connection (Kafka does the same: a
  request that cannot be parsed cannot be answered in its own format), and so does one
  whose arrays hold more than ``pylog.request.max.elements`` elements, refused when the
  count that crosses it is read, before anything is allocated for it;
- a request is decoded on the loop only while it stays within LOOP_ELEMENTS elements:
  a bigger one is decoded, handled and encoded in the broker's CPU pool, so the loop
  serves the other connections meanwhile (the pool thread gives the GIL up every
  switch interval, 5 ms);
- an API or version pylog does not speak gets UNSUPPORTED_VERSION where the message
  has a place for it (ApiVersions always answers with v0; a top-level error_code, as
  Fetch 7+; every partition of a Produce), else the connection closes (an API left out
  of ApiVersions, which clients do not send);
- no request for ``connections.max.idle.ms`` closes the connection, at that deadline: one
  loop timer per connection, re-armed only when it fires early (a timeout per read
  cost a task per request);
- a client that stops reading holds a buffer and a timer, never a thread: the rest of a
  sendfile waits for room in the socket on the loop, and a socket that takes nothing
  for ``connections.max.idle.ms`` closes the connection.
- on a SASL listener, every frame goes to the connection's Authenticator (sasl.py)
  until it has authenticated: at most ``sasl.server.max.receive.size`` bytes each, only
  ApiVersions and the SASL exchange, within ``pylog.connections.authentication.timeout.ms``
  (a loop timer of the Authenticator's).

Responses are lists of parts: bytes go to the transport; file regions go out with
sendfile(2) straight from the page cache once the transport's buffer has drained
(zero-copy fetch). Bytes wait in the connection until the coroutine suspends (a
callback queued on the loop writes them): the responses to requests a client
pipelined, which are answered without suspending, leave in one send(2) instead of
one each (a send per response was a large share of the loop's time under pipelined
produce requests).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import struct
import threading
import time

from pylog.errors import ErrorCode
from pylog.protocol import MalformedMessageError, decode_request, frame_response
from pylog.protocol.api import API_NAMES, API_VERSIONS_KEY, unsupported_version_response
from pylog.protocol.codec import TooManyElementsError

from .sasl import ANONYMOUS, Authenticator

__all__ = ["Connection"]

log = logging.getLogger(__name__)

_i32 = struct.Struct(">i")
_head = struct.Struct(">hh")            # a request's api key and version

#: A request within this many array elements is decoded, handled and encoded on the
#: event loop (a few ms at most); a bigger one in the CPU pool (a thread hop, which
#: requests this big can afford).
LOOP_ELEMENTS = 256
#: A file region that cannot be sendfile(2)'d goes through the transport in reads of this size.
COPY_CHUNK = 1 << 20


class _CollectorPause:
    """CPython's cyclic garbage collector, paused while heavy requests are in flight.

    A heavy request allocates tens of thousands of objects (its body, its answer) that
    live until it is answered; a collection meanwhile (their allocation triggers one)
    walks them all while holding the GIL, which no switch interval interrupts: the
    event loop stalls for the whole collection. They hold no reference cycles:
    reference counting frees them when the request is answered, and the collector
    resumes then. A request that waits (a
    parked Fetch, a JoinGroup) resumes it before waiting. Process-wide (the collector
    is), counted across connections and brokers; heavy requests back to back for more
    than MAX_PAUSE_S let it run again until none is in flight; a collector the process
    had disabled itself stays so."""

    MAX_PAUSE_S = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._paused = False        # this pause disabled it (it was enabled)
        self._since = 0.0

    def hold(self) -> None:
        with self._lock:
            if self._holders == 0 and gc.isenabled():
                gc.disable()
                self._paused = True
                self._since = time.monotonic()
            elif self._paused and time.monotonic() - self._since > self.MAX_PAUSE_S:
                gc.enable()             # never idle of heavy requests: collect as usual
                self._paused = False
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._paused:
                gc.enable()
                self._paused = False


collector_pause = _CollectorPause()


class Connection:
    """One client connection. ``listener`` is the Listener it came in on (its ``name``
    and ``security_protocol``); ``principal`` is who it is, Kafka's ``User:<name>``:
    given by the listener for PLAINTEXT and SSL (``User:ANONYMOUS``, or an SSL
    listener's client certificate mapped by ssl.principal.mapping.rules), None on a SASL
    listener until its Authenticator (``sasl``), which sees every frame until then, has
    authenticated it. ``zero_copy``: file regions may be sendfile(2)'d on the socket
    (PLAINTEXT, or TLS whose sending the kernel holds); else they are read and written
    through the transport."""

    def __init__(self, broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 listener=None, principal: str = ANONYMOUS, zero_copy: bool = True) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.zero_copy = zero_copy
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.host = peer[0]
        self.listener = listener if listener is not None else broker.listener
        if self.listener.sasl:
            self.principal: str | None = None
            self.sasl: Authenticator | None = Authenticator(self, broker.sasl_config(self.listener),
                                                            broker.loop.time())
        else:
            self.principal = principal
            self.sasl = None
        self.task: asyncio.Task | None = None   # the one that runs run() (the broker sets it)
        self.busy = False                  # a request is being handled (graceful shutdown waits)
        self.requests = 0
        self.last_active = 0.0             # loop time of the last request (the idle deadline's)
        self._out: list = []               # response bytes not yet given to the transport
        self._flush_queued = False         # a _flush callback is on the loop
        self._idle_timer: asyncio.TimerHandle | None = None
        self._writable: asyncio.Future | None = None   # a sendfile waiting for room
        self._pausing_collector = False    # a heavy request holds collector_pause
        self.request_bytes = 0             # the size of the request being handled
        #: time.monotonic() until which nothing is read (a quota's throttle, KIP-219)
        self.muted_until = 0.0

    def mute_for(self, seconds: float) -> None:
        """Reads nothing more from this connection for `seconds` (after the response
        being built): Kafka's muted channel of a throttled client. Any thread."""
        self.muted_until = max(self.muted_until, time.monotonic() + seconds)

    def resume_collector(self) -> None:
        """Before a request of this connection waits (a long poll, a rebalance): the
        collector runs again meanwhile (see _CollectorPause). On the loop."""
        if self._pausing_collector:
            self._pausing_collector = False
            collector_pause.release()

    def close(self) -> None:
        """Closes the connection (thread-safe: handlers call it from pool threads)."""
        self.broker.loop.call_soon_threadsafe(self.close_on_loop)

    def close_on_loop(self) -> None:
        """Closes the connection after the response bytes it holds (on the loop)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self.sasl is not None:
            self.sasl.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(ConnectionAbortedError(f"connection {self.peer} closed"))
        self._flush()
        self.writer.close()

    def _idle_deadline(self) -> None:
        """connections.max.idle.ms after the last request (a loop timer): closes the
        connection, or re-arms at the new deadline if a request came meanwhile."""
        self._idle_timer = None
        if self.writer.is_closing():
            return
        loop = self.broker.loop
        idle = self.broker.server_config["connections.max.idle.ms"] / 1000
        due = self.last_active + idle
        if self.busy:
            due = loop.time() + idle      # a request in progress is not idleness
        if due > loop.time():
            self._idle_timer = loop.call_at(due, self._idle_deadline)
            return
        log.info("closing idle connection %s (connections.max.idle.ms)", self.peer)
        self.close_on_loop()

    # ============================================================== loop

    async def run(self) -> None:
        broker = self.broker
        reader = self.reader
        self._idle_timer = broker.loop.call_later(
            broker.server_config["connections.max.idle.ms"] / 1000, self._idle_deadline)
        try:
            while not broker.stopping:
                muted = self.muted_until - time.monotonic()
                if muted > 0:
                    await asyncio.sleep(muted)             # a throttled client: read nothing
                self.last_active = broker.loop.time()      # the idle deadline reads it
                head = await reader.readexactly(4)
                size = _i32.unpack(head)[0]
                sasl = self.sasl
                if sasl is not None and not sasl.complete:
                    # Before authentication: Kafka's smaller bound, and the Authenticator.
                    limit = sasl.config.max_receive_size
                    if size < 0 or size > limit:
                        log.warning("closing connection %s: request size %d before "
                                    "authentication is above sasl.server.max.receive.size (%d)",
                                    self.peer, size, limit)
                        return
                    frame = await reader.readexactly(size)
                    self.busy = True
                    try:
                        if not await sasl.receive(frame):
                            return
                    finally:
                        self.busy = False
                    continue
                limit = broker.server_config["socket.request.max.bytes"]
                if size < 8 or size > limit:
                    log.warning("closing connection %s: request size %d is %s", self.peer, size,
                                f"above socket.request.max.bytes ({limit})" if size > limit
                                else "too small for a request header")
                    return
                # readexactly grows its buffer as bytes arrive: a hostile size prefix
                # costs nothing until the bytes are sent.
                frame = await reader.readexactly(size)
                if sasl is not None:
                    verdict = sasl.admit(frame, broker.loop.time())
                    if verdict == "expired":
                        log.info("closing connection %s: its SASL session expired "
                                 "(connections.max.reauth.ms)", self.peer)
                        broker.stats["sasl.expired_connections_killed"] += 1
                        return
                    if verdict == "reauthenticate":
                        if not await sasl.receive(frame):
                            return
                        continue
                self.busy = True
                try:
                    if not await self._serve(frame):
                        return
                finally:
                    self.busy = False
                    self.resume_collector()        # _serve's objects are gone
                self.requests += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except OSError as exc:
            log.debug("connection %s: %s", self.peer, exc)
        except Exception:
            log.exception("connection %s: unexpected error; closing it", self.peer)
        finally:
            self.close_on_loop()           # answers given before the close still leave
            broker._forget(self)

    async def _decode(self, fn, frame):
        """(fn(frame, max_elements), heavy): on the loop within LOOP_ELEMENTS, else again
        in the CPU pool within ``pylog.request.max.elements`` (heavy). Raises
        TooManyElementsError past that, at once where the count that crossed
        LOOP_ELEMENTS already shows it."""
        limit = self.broker.server_config["pylog.request.max.elements"]
        try:
            return fn(frame, min(LOOP_ELEMENTS, limit)), False
        except TooManyElementsError as exc:
            if exc.needed > limit:
                raise
        if not self._pausing_collector:
            self._pausing_collector = True         # released by run() once answered
            collector_pause.hold()
        return await self.broker.loop.run_in_executor(self.broker.cpu_pool, fn, frame, limit), True

    def _refuse(self, frame, exc: MalformedMessageError) -> bool:
        """One log line for a request that cannot be answered; False (close)."""
        api, version = _head.unpack_from(frame) if len(frame) >= 4 else (-1, -1)
        what = f"{API_NAMES.get(api, 'api key %d' % api)} v{version} request"
        if isinstance(exc, TooManyElementsError):
            limit = self.broker.server_config["pylog.request.max.elements"]
            log.warning("closing connection %s: %s holds more array elements than "
                        "pylog.request.max.elements (%d): an array of %d after %d others",
                        self.peer, what, limit, exc.count, exc.used)
        else:
            log.warning("closing connection %s: malformed %s: %s", self.peer, what, exc)
        return False

    async def _serve(self, frame: bytes) -> bool:
        """Handles one request; False closes the connection."""
        try:
            (header, body, problem), heavy = await self._decode(decode_request, frame)
        except MalformedMessageError as exc:
            return self._refuse(frame, exc)
        if body is None:
            return await self._unsupported(header, frame, problem)
        self.request_bytes = len(frame)
        parts = await self.broker.handle(self, header, body, heavy)
        if parts is None:
            return True                  # acks=0 produce: no response
        await self._send(parts)
        return True

    async def _unsupported(self, header, frame, problem: str) -> bool:
        """A request of an API or version pylog does not speak: UNSUPPORTED_VERSION where
        its message has a place for it, else False (close). (Its own method: the closure
        below would make ``header`` a cell in every _serve frame, parked ones included.)"""
        if header.api_key == API_VERSIONS_KEY:
            # KIP-511: an ApiVersions version we do not know gets a v0 answer with the
            # error and our ranges; the client retries with a version we speak.
            response = self.broker.api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
            await self._send(frame_response(header, response, version=0))
            return True
        try:
            answer, _ = await self._decode(
                lambda f, n: unsupported_version_response(header, f, n), frame)
        except MalformedMessageError:
            answer = None
        if answer is not None:
            log.info("%s: %s (client %r): answered UNSUPPORTED_VERSION", self.peer, problem,
                     header.client_id)
            await self._send(frame_response(header, answer))
            return True
        log.warning("closing connection %s: %s (client %r)", self.peer, problem, header.client_id)
        return False

    async def _send(self, parts: list) -> None:
        writer = self.writer
        for part in parts:
            if isinstance(part, (bytes, bytearray)):
                if part:
                    self._out.append(part)
            else:
                self._flush()
                await self._sent_out()
                if self.zero_copy:
                    await self._send_region(part)
                else:
                    await self._copy_region(part)
        if self._out and not self._flush_queued:
            self._flush_queued = True
            self.broker.loop.call_soon(self._flush)
        # Back-pressure: drain() waits only while the transport's buffer is above its
        # high-water mark, which only _flush fills.
        await writer.drain()

    def _flush(self) -> None:
        """Gives the waiting response bytes to the transport in one write."""
        self._flush_queued = False
        out = self._out
        if out:
            self._out = []
            if not self.writer.is_closing():
                self.writer.write(out[0] if len(out) == 1 else b"".join(out))

    async def _sent_out(self) -> None:
        """Waits until the transport has sent every byte it holds: sendfile(2) writes to
        the socket directly, and would overtake them. (drain() waits only while the
        buffer is above its high-water mark: a response's head left half sent by a full
        socket would stay behind the region.)"""
        transport = self.writer.transport
        holding = transport.get_write_buffer_size() > 0
        if holding:
            transport.set_write_buffer_limits(high=0)    # drain() waits for an empty buffer
        try:
            await self.writer.drain()                    # (and raises if the connection was lost)
        finally:
            if holding:
                transport.set_write_buffer_limits()

    async def _copy_region(self, region) -> None:
        """A file region through the transport, COPY_CHUNK bytes at a time (TLS that
        OpenSSL encrypts in user space: no sendfile), waiting for the transport between
        chunks: a connection holds about one chunk of a response at a time."""
        writer = self.writer
        for start in range(0, region.size, COPY_CHUNK):
            writer.write(region.read(start, min(COPY_CHUNK, region.size - start)))
            await writer.drain()
        self.broker.stats["fetch_bytes_copied"] += region.size

    async def _send_region(self, region) -> None:
        """sendfile(2) of a file region on the transport's socket, whose buffer has
        drained; what does not fit in the socket buffer waits for room on the loop."""
        sock = self.writer.get_extra_info("socket")
        sent = region.send_to(sock.fileno())
        if sent < region.size:
            await self._send_rest(region, sock.fileno(), sent)
        self.broker.stats["fetch_bytes_sendfile"] += region.size

    async def _send_rest(self, region, fd: int, sent: int) -> None:
        """Waits for room in the socket (a writer callback on the loop, no thread), sends,
        repeats; no room for connections.max.idle.ms closes the connection.

        asyncio lets no one else watch a transport's descriptor, so the callback watches
        a dup() of it: the same socket, a descriptor of our own. The transport holds no
        bytes meanwhile (it drained before the region), so it is not watching for room
        itself; the dup is unregistered before it is closed (epoll keys on the open
        socket, not the number), and sends go to the dup, which stays this socket even if
        the transport closes its own descriptor meanwhile."""
        loop = self.broker.loop
        timeout = self.broker.server_config["connections.max.idle.ms"] / 1000
        dup = os.dup(fd)
        try:
            while sent < region.size:
                self._writable = waiting = loop.create_future()
                loop.add_writer(dup, _wake, waiting)
                deadline = loop.call_later(timeout, _expire, waiting, self.peer)
                try:
                    await waiting
                finally:
                    deadline.cancel()
                    loop.remove_writer(dup)
                    self._writable = None
                sent += region.send_to(dup, sent)
        finally:
            os.close(dup)


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _expire(future: asyncio.Future, peer: str) -> None:
    if not future.done():
        future.set_exception(TimeoutError(f"connection {peer} took no bytes for connections.max.idle.ms"))
