"""Broker: serves a store to Kafka clients over Kafka's wire protocol.

``pylog.Broker(store, listen="127.0.0.1:9092")`` serves a store the application also
uses in-process (its own Producers, Consumers and appends see the same logs);
``pylog serve`` opens a store and serves it until SIGTERM/SIGINT.

Threads: one event loop thread runs every connection (connection.py) and the cheap
handlers; handlers that may block (fsync for acks=all, produce requests whose
validation decompresses or walks much, admin work that creates or deletes files,
offset commits) run in a pool, and group joins and syncs, which wait for
the other members, in a second pool sized for waiting; one timer thread drives the
groups' session and rebalance deadlines. docs/ARCHITECTURE.md ("The broker") has the
measurement behind this model.

Graceful shutdown (:meth:`Broker.shutdown`): stop accepting, wake parked long polls
(they answer with what they have), let in-flight requests finish (bounded), close the
connections. The store is not closed: it belongs to whoever opened it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pylog.protocol import API_NAMES

from . import admin, data_plane, groups
from .config import ServerConfig, parse_listener
from .connection import Connection

__all__ = ["Broker"]

log = logging.getLogger(__name__)

HANDLERS = {
    0: data_plane.produce, 1: data_plane.fetch, 2: data_plane.list_offsets,
    3: admin.metadata, 8: groups.offset_commit, 9: groups.offset_fetch,
    10: groups.find_coordinator, 11: groups.join_group, 12: groups.heartbeat,
    13: groups.leave_group, 14: groups.sync_group, 15: groups.describe_groups,
    16: groups.list_groups, 18: admin.api_versions, 19: admin.create_topics,
    20: admin.delete_topics, 21: data_plane.delete_records, 22: data_plane.init_producer_id,
    32: admin.describe_configs, 33: admin.alter_configs, 37: admin.create_partitions,
    42: groups.delete_groups, 44: admin.incremental_alter_configs, 60: admin.describe_cluster,
}

#: Handlers that may block on I/O (fsync, file creation): they run in the I/O pool.
#: Produce only with acks=all or records that take long to validate
#: (data_plane.produce_may_block), Metadata only when it may create a topic (see handle).
BLOCKING = {8, 19, 20, 21, 22, 33, 37, 42, 44}
#: Handlers that wait for other members (a rebalance): the wait pool, sized for waiting.
WAITING = {11, 14}


class Broker:
    """A Kafka-protocol broker over `store` (a ``pylog.LogManager``).

    ``listen`` is ``host:port`` (port 0: a free port; see :attr:`address`). ``config`` holds
    the broker keys of :mod:`pylog.broker.config` (``advertised.listeners``,
    ``socket.request.max.bytes``, ``connections.max.idle.ms``,
    ``group.initial.rebalance.delay.ms``, ...), with Kafka's names or underscores.
    Use as a context manager, or call :meth:`start` and :meth:`shutdown`.
    """

    def __init__(self, store, listen: str | None = None, config: Mapping[str, Any] | None = None,
                 **configs: Any) -> None:
        values = dict(config or {})
        values.update(configs)
        if listen is not None:
            values["listeners"] = listen
        self.store = store
        self.server_config = ServerConfig(values)
        self.node_id = int(store.config["node.id"])
        self.cluster_id = getattr(store, "cluster_id", None) or "pylog-" + str(self.node_id)
        self.stats: Counter = Counter()
        self.request_ms: Counter = Counter()     # request type -> total ms (TotalTimeMs)
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._listener: socket.socket | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._parked: set[asyncio.Event] = set()
        self._loop_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._io_pool = ThreadPoolExecutor(16, thread_name_prefix="pylog-broker-io")
        self._wait_pool = ThreadPoolExecutor(1024, thread_name_prefix="pylog-broker-wait")
        self.address: tuple[str, int] = parse_listener(self.server_config["listeners"])

    # ========================================================== lifecycle

    def start(self) -> Broker:
        host, port = self.address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
        self._listener = sock
        self.address = sock.getsockname()[:2]
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run_loop() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self._server = self.loop.run_until_complete(asyncio.start_server(
                    self._on_connection, sock=sock, limit=1 << 20))
            except BaseException as exc:          # noqa: BLE001 - reported by start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.call_later(1.0, self._sweep_idle)
            self.loop.run_forever()
            self.loop.close()

        self._loop_thread = threading.Thread(target=run_loop, name="pylog-broker-loop", daemon=True)
        self._loop_thread.start()
        threading.Thread(target=self._timer, name="pylog-group-timer", daemon=True).start()
        ready.wait()
        if failure:
            raise failure[0]
        log.info("pylog broker (node %d) listening on %s:%d, advertised as %s:%d",
                 self.node_id, *self.address, *self.advertised)
        return self

    @property
    def advertised(self) -> tuple[str, int]:
        text = self.server_config["advertised.listeners"]
        if text:
            return parse_listener(text, "advertised.listeners")
        host, port = self.address
        return ("127.0.0.1" if host in ("0.0.0.0", "::") else host), port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers``."""
        return "%s:%d" % self.advertised

    def __enter__(self) -> Broker:
        return self.start() if self._listener is None else self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def serve_forever(self) -> None:
        """Blocks until :meth:`shutdown` (from a signal handler or another thread)."""
        while not self._stopped.wait(0.5):
            pass

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops accepting, answers parked fetches, waits up to `timeout` for in-flight
        requests, closes every connection. Idempotent."""
        if self.stopping:
            self._stopped.wait(timeout)
            return
        self.stopping = True
        deadline = time.monotonic() + timeout
        loop = self.loop
        if loop is not None and loop.is_running():
            def stop_accepting() -> None:
                if self._server is not None:
                    self._server.close()
                for event in list(self._parked):
                    event.set()
            loop.call_soon_threadsafe(stop_accepting)
        # In-process members go back to sharing the group among themselves alone.
        self.store.coordinator.stop_bridges()
        while time.monotonic() < deadline:
            with self._lock:
                busy = [c for c in self._connections if c.busy]
            if not busy:
                break
            time.sleep(0.01)
        if loop is not None and loop.is_running():
            async def close_all() -> None:
                with self._lock:
                    connections = list(self._connections)
                for c in connections:
                    c.close_on_loop()
                await asyncio.sleep(0)
            try:
                asyncio.run_coroutine_threadsafe(close_all(), loop).result(max(0.1, deadline - time.monotonic()))
            except Exception:                   # noqa: BLE001 - closing anyway
                pass
            loop.call_soon_threadsafe(loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(max(0.1, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
        self._io_pool.shutdown(wait=False, cancel_futures=True)
        self._wait_pool.shutdown(wait=False, cancel_futures=True)
        self._stopped.set()
        log.info("pylog broker stopped (%d requests served)", sum(
            v for k, v in self.stats.items() if k.startswith("requests.")))

    # ========================================================= connections

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            if len(self._connections) >= self.server_config["max.connections"]:
                log.warning("refusing connection from %s: max.connections (%d) reached",
                            writer.get_extra_info("peername"), self.server_config["max.connections"])
                writer.close()
                return
            conn = Connection(self, reader, writer)
            self._connections.add(conn)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats["connections.accepted"] += 1
        await conn.run()

    def _sweep_idle(self) -> None:
        """Closes connections with no request for connections.max.idle.ms (on the loop)."""
        idle = self.server_config["connections.max.idle.ms"] / 1000
        now = self.loop.time()
        with self._lock:
            stale = [c for c in self._connections if not c.busy and now - c.last_active > idle]
        for c in stale:
            log.info("closing idle connection %s (connections.max.idle.ms)", c.peer)
            c.close_on_loop()
        if not self.stopping:
            self.loop.call_later(min(1.0, idle / 4), self._sweep_idle)

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._connections.discard(conn)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def _timer(self) -> None:
        while not self._stopped.wait(0.1):
            try:
                self.store.coordinator.tick_classic_groups()
            except Exception:               # noqa: BLE001 - the timer must keep running
                log.exception("group timer failed")

    # ============================================================ requests

    def park(self, event: asyncio.Event) -> None:
        """A long poll waits on `event` (on the loop); shutdown sets it."""
        self._parked.add(event)
        if self.stopping:
            event.set()

    def unpark(self, event: asyncio.Event) -> None:
        self._parked.discard(event)

    async def handle(self, conn: Connection, header, body):
        key = header.api_key
        name = API_NAMES.get(key, str(key))
        self.stats["requests." + name] += 1
        started = time.perf_counter()
        try:
            handler = HANDLERS[key]
            if key == 1:
                return await handler(self, conn, header, body)
            if key in WAITING:
                pool = self._wait_pool
            elif key in BLOCKING or (key == 0 and data_plane.produce_may_block(body)) or \
                    (key == 3 and self._may_create(body)):
                pool = self._io_pool
            else:
                return handler(self, conn, header, body)
            return await self.loop.run_in_executor(pool, handler, self, conn, header, body)
        finally:
            # Kafka's TotalTimeMs: from the request to its response (a long poll's wait too).
            self.request_ms[name] += (time.perf_counter() - started) * 1000

    def metrics(self) -> dict:
        """The broker's figures with Kafka's names: per request type ``RequestsPerSec``
        (a count) and ``TotalTimeMs`` (a sum), ``MessagesIn``, ``BytesIn``, ``BytesOut``,
        connections accepted and open."""
        requests = {}
        for key, count in list(self.stats.items()):
            if key.startswith("requests."):
                name = key.split(".", 1)[1]
                requests[name] = {"count": count, "total_ms": self.request_ms.get(name, 0.0)}
        return {"requests": requests, "MessagesIn": self.stats["records_in"],
                "BytesIn": self.stats["bytes_in"], "BytesOut": self.stats["bytes_out"],
                "ConnectionsAccepted": self.stats["connections.accepted"],
                "Connections": len(self._connections)}

    def _may_create(self, req) -> bool:
        """Whether a Metadata request may auto-create a topic (file work: the I/O pool)."""
        if not req.topics or not self.store.config["auto.create.topics.enable"]:
            return False
        known = self.store.partition_count
        return any(t.name is not None and known(t.name) is None for t in req.topics)

    def api_versions_response(self, error: int):
        return admin.api_versions_response(error)

    def all_configs(self) -> dict[str, Any]:
        """The broker's configs: the store's and the server's (DescribeConfigs BROKER)."""
        out = dict(self.store.config)
        out.update(self.server_config)
        return out
