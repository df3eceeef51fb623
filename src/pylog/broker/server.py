"""Broker: serves a store to Kafka clients over Kafka's wire protocol.

``pylog.Broker(store, listen="127.0.0.1:9092")`` serves a store the application also
uses in-process (its own Producers, Consumers and appends see the same logs);
``pylog serve`` opens a store and serves it until SIGTERM/SIGINT.

Threads: one acceptor, one thread per connection (connection.py), one timer for the
groups' session and rebalance deadlines. Handlers run on the connection's thread and
call the store directly; the store is thread-safe and releases the GIL in its C core.

Graceful shutdown (:meth:`Broker.shutdown`): stop accepting, wake parked long polls
(they answer with what they have), let in-flight requests finish (bounded), close the
connections. The store is not closed: it belongs to whoever opened it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pylog.protocol import API_NAMES

from . import admin, data_plane, groups
from .config import ServerConfig, parse_listener
from .connection import Connection

__all__ = ["Broker"]

log = logging.getLogger("pylog.broker")

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
        self.node_id = int(store.config["node.id"]) if "node.id" in store.config else 0
        self.cluster_id = getattr(store, "cluster_id", None) or "pylog-" + str(self.node_id)
        self.stats: Counter = Counter()
        self.stopping = False
        self._listener: socket.socket | None = None
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._parked: set[threading.Event] = set()
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
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
        for name, target in (("pylog-acceptor", self._accept_loop), ("pylog-group-timer", self._timer)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
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
        if self._listener is not None:
            # shutdown() first: it wakes the acceptor blocked in accept() (close() alone
            # would leave the socket listening until accept returned).
            for stop in (lambda: self._listener.shutdown(socket.SHUT_RDWR), self._listener.close):
                try:
                    stop()
                except OSError:
                    pass
        with self._lock:
            parked = list(self._parked)
        for event in parked:
            event.set()
        # In-process members go back to sharing the group among themselves alone.
        self.store.coordinator.stop_bridges()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                busy = [c for c in self._connections if c.busy]
            if not busy:
                break
            time.sleep(0.01)
        with self._lock:
            connections = list(self._connections)
        for c in connections:
            c.close()
        for c in connections:
            c.thread.join(max(0.0, deadline - time.monotonic()))
        self._stopped.set()
        log.info("pylog broker stopped (%d requests served)", sum(
            v for k, v in self.stats.items() if k.startswith("requests.")))

    # ========================================================= connections

    def _accept_loop(self) -> None:
        listener = self._listener
        while not self.stopping:
            try:
                sock, peer = listener.accept()
            except OSError:
                if self.stopping:
                    return
                time.sleep(0.01)            # EMFILE and friends: retry, do not spin
                continue
            with self._lock:
                if len(self._connections) >= self.server_config["max.connections"]:
                    log.warning("refusing connection from %s: max.connections (%d) reached",
                                peer, self.server_config["max.connections"])
                    sock.close()
                    continue
                conn = Connection(self, sock, peer)
                self._connections.add(conn)
            self.stats["connections.accepted"] += 1
            conn.start()

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

    def park(self, event: threading.Event) -> None:
        """A long poll waits on `event`; shutdown sets it."""
        with self._lock:
            self._parked.add(event)
        if self.stopping:
            event.set()

    def unpark(self, event: threading.Event) -> None:
        with self._lock:
            self._parked.discard(event)

    def handle(self, conn: Connection, header, body):
        self.stats["requests." + API_NAMES.get(header.api_key, str(header.api_key))] += 1
        return HANDLERS[header.api_key](self, conn, header, body)

    def api_versions_response(self, error: int):
        return admin.api_versions_response(error)

    def all_configs(self) -> dict[str, Any]:
        """The broker's configs: the store's and the server's (DescribeConfigs BROKER)."""
        out = dict(self.store.config)
        out.update(self.server_config)
        return out
