"""Broker: serves a store to Kafka clients over Kafka's wire protocol.

``pylog.Broker(store, listen="127.0.0.1:9092")`` serves a store the application also
uses in-process (its own Producers, Consumers and appends see the same logs);
``pylog serve`` opens a store and serves it until SIGTERM/SIGINT.

Threads: one event loop thread accepts and runs every connection (connection.py) and
every handler that does not block, waiting ones included: a parked fetch, a JoinGroup
or SyncGroup waiting for the other members (a future the group completes) and the rest
of a sendfile to a slow reader (a writer callback) cost no thread. Handlers that may
block on the disk or the CPU run in pools: the I/O pool (an fsync for acks=all, a
produce request whose validation decompresses or walks much, admin work that creates
or deletes files) and the group pool (appends to __consumer_offsets: offset
commits, DeleteGroups), so a group's progress never queues behind the data plane's
fsyncs. Requests too big to decode or answer on the loop (more than
connection.LOOP_ELEMENTS array elements), and answers sized by the store rather than
the request (Metadata for every topic, OffsetFetch, DescribeGroups, ListGroups,
DescribeConfigs), run in a small CPU pool. The group coordinator's deadlines run on
its timer thread (coordinator/timer.py); idle connections close on a loop timer each.
docs/ARCHITECTURE.md ("The broker") has the reasons for this model.

Accepting: the listener is the loop's own reader (not asyncio's server, which listens
again with a backlog of 100 and, out of file descriptors, logs a traceback per failed
accept, hundreds per loop pass). Out of fds (or any
accept error) the broker stops accepting for ACCEPT_PAUSE_S, leaving the connections
waiting in the kernel's backlog, and logs one line per ACCEPT_LOG_INTERVAL_S.

Listeners (listeners.py): each listener's security protocol (``listeners`` and
``listener.security.protocol.map``) decides its connections' transport and who they
are. SSL and SASL_SSL connections handshake TLS on the socket first (bounded by
pylog.ssl.handshake.timeout.ms), then run over a TlsTransport (tls_transport.py) whose
directions are the kernel's where kTLS took them, into a FrameReader (frame_reader.py:
decrypted bytes land in the buffer a request frame is taken from). On SSL the principal is the client
certificate's (ssl.principal.mapping.rules), else ANONYMOUS; on SASL_PLAINTEXT and
SASL_SSL every connection authenticates before its first request (sasl.py), which
sets its principal; a connection that has not authenticated in time is closed by its
Authenticator's loop timer. Every listener's TLS context and SASL settings are checked
when the broker is made (a bad key fails there, naming it).

Authorization and quotas: with ``authorizer.class.name`` set, every handler checks the
connection's principal as Kafka's do (authorizer.py, and the checks in each handler
module); client quotas measure and throttle each request (quotas.py). Both are the
network face's only: the store's in-process users are not checked.

Graceful shutdown (:meth:`Broker.shutdown`): stop accepting, wake parked long polls
(they answer with what they have), let in-flight requests finish (bounded), close the
connections. The store is not closed: it belongs to whoever opened it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pylog.coordinator.offset_expiry import expire_offsets
from pylog.protocol import API_NAMES, ApiKey, frame_response

from pylog.common.config import normalize_key

from . import (acls, admin, configs, consumer_groups, data_plane, groups, leader_epochs, log_dirs,
               quotas, sasl, share_group_offsets, share_groups, telemetry, transactions, users)
from .authorizer import authorizer_of
from .config import DYNAMIC_SERVER_CONFIGS, SERVER_CONFIGS, ServerConfig
from .connection import Connection
from .fetch_sessions import FetchSessionCache
from .listeners import Listener
from .tls import kernel_directions, ktls_support, server_context, tls_engine
from .tls_principal import ANONYMOUS, NoMatchingRule, subject_name
from .frame_reader import FrameReader
from .tls_transport import TlsTransport, handshake

__all__ = ["Broker"]

log = logging.getLogger(__name__)

HANDLERS = {
    ApiKey.PRODUCE: data_plane.produce,
    ApiKey.FETCH: data_plane.fetch,
    ApiKey.LIST_OFFSETS: data_plane.list_offsets,
    ApiKey.METADATA: admin.metadata,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,
    ApiKey.API_VERSIONS: admin.api_versions,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.DELETE_TOPICS: admin.delete_topics,
    ApiKey.DELETE_RECORDS: data_plane.delete_records,
    ApiKey.INIT_PRODUCER_ID: data_plane.init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: leader_epochs.offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
    ApiKey.END_TXN: transactions.end_txn,
    ApiKey.WRITE_TXN_MARKERS: transactions.write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: log_dirs.alter_replica_log_dirs,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
    ApiKey.CREATE_PARTITIONS: admin.create_partitions,
    ApiKey.DELETE_GROUPS: groups.delete_groups,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: log_dirs.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: log_dirs.list_partition_reassignments,
    ApiKey.OFFSET_DELETE: groups.offset_delete,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: quotas.alter_client_quotas,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: users.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: users.alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
    ApiKey.DESCRIBE_PRODUCERS: transactions.describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_groups.consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_groups.consumer_group_describe,
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: telemetry.get_telemetry_subscriptions,
    ApiKey.PUSH_TELEMETRY: telemetry.push_telemetry,
    ApiKey.SHARE_GROUP_HEARTBEAT: share_groups.share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: share_groups.share_group_describe,
    ApiKey.SHARE_FETCH: share_groups.share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share_groups.share_acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_group_offsets.describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_group_offsets.alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_group_offsets.delete_share_group_offsets,
}

#: Handlers that may block on I/O (fsync, file creation): they run in the I/O pool.
#: Produce only with acks=all or records that take long to validate
#: (data_plane.produce_may_block), Metadata only when it may create a topic (see handle).
BLOCKING = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.DELETE_RECORDS,
            ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
            ApiKey.END_TXN, ApiKey.WRITE_TXN_MARKERS, ApiKey.TXN_OFFSET_COMMIT, ApiKey.CREATE_ACLS,
            ApiKey.DELETE_ACLS, ApiKey.ALTER_CONFIGS, ApiKey.CREATE_PARTITIONS,
            ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CLIENT_QUOTAS,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_REPLICA_LOG_DIRS,
            ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_ACKNOWLEDGE}
#: Handlers that append to __consumer_offsets (OffsetCommit, DeleteGroups, OffsetDelete): the group
#: pool, which the data plane's fsyncs never fill.
GROUP_IO = {ApiKey.OFFSET_COMMIT, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE}
#: Handlers that wait for the other members (JoinGroup, SyncGroup), or for records to
#: acquire (ShareFetch): coroutines on the loop, awaiting a future or an append (no
#: thread waits); ShareFetch's state changes run in the I/O pool.
WAITING = {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.SHARE_FETCH}
#: Threads of the group pool: its appends serialise on the coordinator's lock anyway.
GROUP_POOL_THREADS = 2
#: Handlers whose answers grow with the store, not the request (OffsetFetch of a group's
#: every offset, DescribeGroups, ListGroups, DescribeConfigs): the CPU pool, as
#: Metadata for every topic. Each distinct key they name is answered once (see
#: _distinct_keys), so repeating a key cannot multiply a store-sized answer.
STORE_SIZED = {ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
               ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_TRANSACTIONS,
               ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.SHARE_GROUP_DESCRIBE}

#: New connections taken per loop pass (Kafka's Processor configures at most 20 per
#: poll, its ConnectionQueueSize): 1,030 connections opened at once, each with a Fetch,
#: answered 512 per pass stalled the other clients 0.6-1.5 s.
NEW_CONNECTIONS_PER_PASS = 20
#: After a failed accept (out of fds: EMFILE), accepting pauses this long.
ACCEPT_PAUSE_S = 0.1
#: Failed accepts are logged once per this many seconds (with how many failed).
ACCEPT_LOG_INTERVAL_S = 10.0


class _CoordinatorStopping(Exception):
    """A parked group request meets the broker's shutdown."""


class Broker:
    """A Kafka-protocol broker over `store` (a ``pylog.Store``).

    ``listen`` is Kafka's ``listeners``: ``host:port`` or ``NAME://host:port,...``
    (port 0: a free port; see :attr:`listeners` once started); a listener's security
    protocol (``listener.security.protocol.map``) makes it authenticate clients (SASL),
    encrypt (TLS) or both. ``config`` holds the broker keys of :mod:`pylog.broker.config`
    (``advertised.listeners``, ``ssl.*``, ``sasl.*``, ``socket.request.max.bytes``,
    ``connections.max.idle.ms``, ...), with Kafka's names or underscores. Use as a
    context manager, or call :meth:`start` and :meth:`shutdown`.
    """

    def __init__(self, store, listen: str | None = None, config: Mapping[str, Any] | None = None,
                 **configs: Any) -> None:
        values = dict(config or {})
        values.update(configs)
        if listen is not None:
            values["listeners"] = listen
        self.store = store
        self.server_config = ServerConfig(values)
        self.fetch_sessions = FetchSessionCache(
            self.server_config["max.incremental.fetch.session.cache.slots"])
        self.telemetry = telemetry.TelemetryClients()
        #: The broker keys as given (Kafka's STATIC_BROKER_CONFIG); the dynamic ones
        #: (``max.connections``) are the store's, applied by :meth:`_reconfigure`.
        self.static_server_config = {normalize_key(k): v for k, v in values.items()}
        self.node_id = int(store.config["node.id"])
        self.cluster_id = getattr(store, "cluster_id", None) or "pylog-" + str(self.node_id)
        self.stats: Counter = Counter()
        self.request_ms: Counter = Counter()     # request type -> total ms (TotalTimeMs)
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The listeners, with the ports they got once started (Kafka's ``listeners``).
        self.listeners: list[Listener] = list(self.server_config.listeners)
        self._sockets: list[tuple[Listener, socket.socket]] = []   # bound, listening
        # TLS listeners' contexts (and principal mappers), built now: a bad ssl.* key
        # fails the construction, before anything listens.
        self.ktls = self.server_config["pylog.ssl.ktls.enable"] and ktls_support().available
        self._tls = {listener.name: server_context(self.server_config, listener, self.ktls)
                     for listener in self.listeners if listener.tls}
        #: Which record layer the TLS listeners use, and why (pylog.tls_engine()).
        self.tls_engine = tls_engine(self.server_config["pylog.ssl.ktls.enable"]) \
            if self._tls else None
        # SASL listeners' settings, checked now too.
        self._sasl_configs: dict[str, sasl.SaslConfig] = {}
        for listener in self.listeners:
            if listener.sasl:
                self.sasl_config(listener)
        # Registered once the keys are known good (a refused config leaves nothing behind).
        store.add_reconfigurable({k: SERVER_CONFIGS[k] for k in DYNAMIC_SERVER_CONFIGS},
                                 self._reconfigure)
        self._tls_handshakes = 0           # TLS connections in their handshake
        self._accepting = False            # the listeners are the loop's readers
        self._accept_failures = 0          # since the last log line about them
        self._accept_logged = -ACCEPT_LOG_INTERVAL_S
        self._handshakes: set[asyncio.Task] = set()   # accepted sockets being wrapped
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._parked: set[asyncio.Event] = set()
        self._group_waits: set[asyncio.Future] = set()
        self._loop_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._io_pool = ThreadPoolExecutor(16, thread_name_prefix="pylog-broker-io")
        self._group_pool = ThreadPoolExecutor(GROUP_POOL_THREADS, thread_name_prefix="pylog-broker-group")
        self._loop_ident: int | None = None
        # Pure-Python work too big for the loop (see handle): two threads, since the GIL
        # runs one at a time; the loop keeps its turn every switch interval.
        self.cpu_pool = ThreadPoolExecutor(2, thread_name_prefix="pylog-broker-cpu")
        first = self.listeners[0]
        #: The first listener's bound address (host, port).
        self.address: tuple[str, int] = (first.host or "0.0.0.0", first.port)
        #: Kafka's StandardAuthorizer over the store's ACLs, or None (authorizer.class.name
        #: empty: every request allowed); the quota managers (quotas.py).
        self.authorizer = authorizer_of(self.server_config, store)
        self.quotas = quotas.QuotaManagers(self)

    # ========================================================== lifecycle

    def start(self) -> Broker:
        try:
            for i, listener in enumerate(self.listeners):
                sock = self._listen(listener)
                self.listeners[i] = listener = dataclasses.replace(
                    listener, port=sock.getsockname()[1])
                self._sockets.append((listener, sock))
        except BaseException:
            for _, sock in self._sockets:
                sock.close()
            self._sockets.clear()
            raise
        self.address = self._sockets[0][1].getsockname()[:2]
        cfg = self.server_config
        # The groups of the last run, from __consumer_offsets: their members go on.
        self.store.coordinator.restore_groups(
            initial_delay_ms=cfg["group.initial.rebalance.delay.ms"],
            assignors=list(cfg["group.consumer.assignors"]),
            session_timeout_ms=cfg["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=cfg["group.consumer.heartbeat.interval.ms"],
            max_size=cfg["group.consumer.max.size"])
        share_groups.shares_of(self)         # (its members too: sessions count from now)
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run_loop() -> None:
            asyncio.set_event_loop(self.loop)
            self._loop_ident = threading.get_ident()
            try:
                self._start_accepting()
            except BaseException as exc:          # noqa: BLE001 - reported by start()
                failure.append(exc)
                ready.set()
                return
            ready.set()
            self.loop.run_forever()
            self.loop.close()

        self._loop_thread = threading.Thread(target=run_loop, name="pylog-broker-loop", daemon=True)
        self._loop_thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        retention_ms = self.server_config["offsets.retention.minutes"] * 60_000
        self.store.add_periodic_task(
            "offsets-retention", self.server_config["offsets.retention.check.interval.ms"],
            lambda now: None if self.stopping else
            expire_offsets(self.store.coordinator, now, retention_ms))
        log.info("pylog broker (node %d) listening on %s", self.node_id, ", ".join(
            "%s (%s, advertised as %s:%d)" % (listener, listener.security_protocol,
                                              *self.advertised_address(listener))
            for listener in self.listeners))
        if self.tls_engine is not None:
            # Once at start-up: whether TLS fetches stay zero-copy (kTLS) or are copied.
            (log.info if self.ktls else log.warning)("TLS listeners: %s", self.tls_engine)
        return self

    def _listen(self, listener: Listener) -> socket.socket:
        """A listening socket for `listener` (an empty host: every interface)."""
        host = listener.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, listener.port))
            sock.listen(self.server_config["socket.listen.backlog.size"])
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            # "Address already in use" alone does not say which address.
            raise type(exc)(exc.errno, f"cannot listen on {host}:{listener.port} (listeners: "
                                       f"{listener.name}): {exc.strerror or exc}") from exc
        except BaseException:
            sock.close()
            raise
        return sock

    @property
    def listener(self) -> Listener:
        """The first listener (with the port it got once started)."""
        return self.listeners[0]

    def listener_named(self, name: str) -> Listener:
        """The listener named `name` (case-insensitive)."""
        for listener in self.listeners:
            if listener.name == name.upper():
                return listener
        raise KeyError(f"no listener named {name!r} (listeners: "
                       f"{', '.join(str(listener) for listener in self.listeners)})")

    def advertised_address(self, listener: Listener) -> tuple[str, int]:
        """(host, port) that Metadata gives the clients of `listener`: its entry in
        advertised.listeners, else its own address (loopback for every interface)."""
        host = listener.advertised_host
        if host is None:
            host = "127.0.0.1" if listener.host in ("", "0.0.0.0", "::") else listener.host
        return host, listener.advertised_port or listener.port

    @property
    def advertised(self) -> tuple[str, int]:
        """The first listener's advertised (host, port)."""
        return self.advertised_address(self.listeners[0])

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for clients' ``bootstrap.servers``: the first listener's."""
        return "%s:%d" % self.advertised

    def bootstrap(self, listener: str) -> str:
        """``host:port`` of the listener named `listener` (advertised)."""
        return "%s:%d" % self.advertised_address(self.listener_named(listener))

    def __enter__(self) -> Broker:
        return self.start() if not self._sockets else self

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
        self.store.remove_reconfigurable(self._reconfigure)
        deadline = time.monotonic() + timeout
        loop = self.loop
        if loop is not None and loop.is_running():
            def stop_accepting() -> None:
                self._stop_accepting()
                for event in list(self._parked):
                    event.set()
                # Parked JoinGroups and SyncGroups: NOT_COORDINATOR, as Kafka answers
                # them when a coordinator unloads (the clients look for it again).
                for future in list(self._group_waits):
                    if not future.done():
                        future.set_exception(_CoordinatorStopping())
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
                for task in list(self._handshakes):
                    task.cancel()              # TLS handshakes in progress
                await asyncio.sleep(0)
            try:
                asyncio.run_coroutine_threadsafe(close_all(), loop).result(max(0.1, deadline - time.monotonic()))
            except Exception:                   # noqa: BLE001 - closing anyway
                pass
            loop.call_soon_threadsafe(loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(max(0.1, deadline - time.monotonic()))
        for _, sock in self._sockets:
            sock.close()
        self._io_pool.shutdown(wait=False, cancel_futures=True)
        self._group_pool.shutdown(wait=False, cancel_futures=True)
        self.cpu_pool.shutdown(wait=False, cancel_futures=True)
        self._stopped.set()
        log.info("pylog broker stopped (%d requests served)", sum(
            v for k, v in self.stats.items() if k.startswith("requests.")))

    # ========================================================= connections

    def _start_accepting(self) -> None:
        """Makes the listeners the loop's readers (on the loop)."""
        if not self.stopping and not self._accepting:
            for listener, sock in self._sockets:
                self.loop.add_reader(sock.fileno(), self._accept, listener, sock)
            self._accepting = True

    def _stop_accepting(self) -> None:
        if self._accepting:
            for _, sock in self._sockets:
                self.loop.remove_reader(sock.fileno())
            self._accepting = False

    def _accept(self, listener: Listener, listening: socket.socket) -> None:
        """A listener is readable: accepts the waiting connections, at most
        NEW_CONNECTIONS_PER_PASS per loop pass (the rest on the next), so a burst of new
        connections and their first requests cannot starve the open ones."""
        for _ in range(min(NEW_CONNECTIONS_PER_PASS, self.server_config["socket.listen.backlog.size"])):
            try:
                sock, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                self._accept_failed(exc)
                return
            sock.setblocking(False)
            task = self.loop.create_task(self._wrap_tls(sock, listener) if listener.tls
                                         else self._wrap(sock, listener))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _accept_failed(self, exc: OSError) -> None:
        """Pauses accepting for ACCEPT_PAUSE_S (the kernel keeps the connections waiting
        in the backlog) and logs once per ACCEPT_LOG_INTERVAL_S."""
        self._stop_accepting()
        self.loop.call_later(ACCEPT_PAUSE_S, self._start_accepting)
        self._accept_failures += 1
        now = self.loop.time()
        if now - self._accept_logged >= ACCEPT_LOG_INTERVAL_S:
            hint = " (out of file descriptors: raise ulimit -n, or lower max.connections)" \
                if exc.errno in (errno.EMFILE, errno.ENFILE) else ""
            log.error("accepting connections failed %d time(s) in the last %.0f s: %s%s; %d "
                      "connections open; accepting again every %.0f ms meanwhile",
                      self._accept_failures, min(now - self._accept_logged, ACCEPT_LOG_INTERVAL_S),
                      exc, hint, self.connection_count, ACCEPT_PAUSE_S * 1000)
            self._accept_logged = now
            self._accept_failures = 0

    async def _wrap(self, sock: socket.socket, listener: Listener) -> None:
        """An accepted socket as asyncio streams, served by _on_connection."""
        loop = self.loop
        reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, _Serve(self, listener), loop=loop)
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock)
        except OSError as exc:
            log.debug("dropping an accepted connection: %s", exc)
            sock.close()

    async def _wrap_tls(self, sock: socket.socket, listener: Listener) -> None:
        """An accepted socket of a TLS listener: the handshake on the socket itself
        (bounded by pylog.ssl.handshake.timeout.ms, and counted against max.connections
        while it runs), the principal of a client certificate (SSL listeners), then a
        TlsTransport whose directions are the kernel's where kTLS took them
        (tls_transport.py), served by _on_connection."""
        loop, config = self.loop, self.server_config
        peer = _peer(sock)
        with self._lock:
            opened = len(self._connections) + self._tls_handshakes
        if opened >= config["max.connections"]:
            log.warning("refusing connection from %s: max.connections (%d) reached", peer,
                        config["max.connections"])
            sock.close()
            return
        context, mapper = self._tls[listener.name]
        try:
            tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (OSError, ValueError) as exc:
            log.debug("dropping an accepted connection: %s", exc)
            sock.close()
            return
        self._tls_handshakes += 1
        try:
            await handshake(loop, tls, config["pylog.ssl.handshake.timeout.ms"] / 1000)
        except asyncio.CancelledError:
            tls.close()
            raise
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            # Kafka: "Failed authentication with <peer> (SSL handshake failed)".
            self.stats["tls.handshakes.failed"] += 1
            reason = "no handshake within pylog.ssl.handshake.timeout.ms" \
                if isinstance(exc, TimeoutError) else getattr(exc, "reason", None) or exc
            log.info("Failed authentication with %s on %s (SSL handshake failed: %s)", peer,
                     listener, reason)
            tls.close()
            return
        finally:
            self._tls_handshakes -= 1
        principal = ANONYMOUS
        certificate = tls.getpeercert(binary_form=True)
        if certificate and listener.security_protocol == "SSL":
            try:
                principal = "User:" + mapper.name(subject_name(certificate))
            except (NoMatchingRule, ValueError) as exc:
                log.warning("closing connection %s on %s: its certificate gives no principal "
                            "(ssl.principal.mapping.rules): %s", peer, listener, exc)
                tls.close()
                return
        kernel_tx, kernel_rx = kernel_directions(tls) if self.ktls else (False, False)
        self.stats["tls.connections.ktls" if kernel_tx else "tls.connections.user_space"] += 1
        protocol = FrameReader(loop, _Serve(self, listener, principal, kernel_tx))
        TlsTransport(loop, tls, protocol, kernel_tx, kernel_rx).start()

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       listener: Listener, principal: str = ANONYMOUS, zero_copy: bool = True) -> None:
        """A new connection: its Connection, and the task that runs it (the connection
        holds it). Not a coroutine the stream protocol would wrap in a task: that adds a
        coroutine and a done-callback closure to every connection, for the collector to
        walk on each full pass."""
        with self._lock:
            if len(self._connections) >= self.server_config["max.connections"]:
                log.warning("refusing connection from %s: max.connections (%d) reached",
                            writer.get_extra_info("peername"), self.server_config["max.connections"])
                writer.close()
                return
            conn = Connection(self, reader, writer, listener, principal, zero_copy)
            self._connections.add(conn)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats["connections.accepted"] += 1
        conn.task = self.loop.create_task(conn.run())

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._connections.discard(conn)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    # ============================================================ requests

    def park(self, event: asyncio.Event) -> None:
        """A long poll waits on `event` (on the loop); shutdown sets it."""
        self._parked.add(event)
        if self.stopping:
            event.set()

    def unpark(self, event: asyncio.Event) -> None:
        self._parked.discard(event)

    async def group_wait(self, operation, /, *args, **kwargs):
        """Starts a group operation that answers through a callback
        (``operation(*args, respond=..., **kwargs)``) and awaits the answer as a future: no
        thread waits. The group may answer from any thread (a request's, the
        coordinator's timer, the in-process bridge). None if the broker stops first (the
        caller answers NOT_COORDINATOR). A parked join holds a future and a
        _GroupAnswer, no closures: each object it holds is one more for every full pass
        of the cyclic collector, on the loop."""
        future = self.loop.create_future()
        operation(*args, respond=_GroupAnswer(future, self._loop_ident), **kwargs)
        if future.done():
            return future.result()
        self._group_waits.add(future)
        if self.stopping:
            future.set_exception(_CoordinatorStopping())
        try:
            return await future
        except _CoordinatorStopping:
            return None
        finally:
            self._group_waits.discard(future)

    async def handle(self, conn: Connection, header, body, heavy: bool = False):
        """The response to one request, framed (a list of parts), or None (acks=0).
        ``heavy``: the request has more than connection.LOOP_ELEMENTS elements, so its
        handler and encoding run off the loop (the CPU pool, unless another pool)."""
        key = header.api_key
        name = API_NAMES.get(key, str(key))
        self.stats["requests." + name] += 1
        started = time.perf_counter()
        try:
            handler = HANDLERS[key]
            if key == ApiKey.FETCH:
                response = await handler(self, conn, header, body, heavy)
                if self.quotas.active:
                    # (a parked fetch's wait is not handler time: request_percentage
                    # counts what the handler did, here 0)
                    response = self.quotas.throttle_fetch(conn, header, response, 0.0)
                if heavy:
                    return await self.loop.run_in_executor(self.cpu_pool, frame_response,
                                                           header, response)
                return frame_response(header, response)
            if key in WAITING:
                conn.resume_collector()          # it may wait for minutes
                response = await handler(self, conn, header, body)
                if heavy:
                    return await self.loop.run_in_executor(self.cpu_pool, frame_response,
                                                           header, response)
                return frame_response(header, response)
            if key in GROUP_IO:
                pool = self._group_pool
            elif key in BLOCKING or (key == ApiKey.PRODUCE and data_plane.produce_may_block(body)):
                pool = self._io_pool
            elif heavy or key in STORE_SIZED or (key == ApiKey.METADATA and _all_topics(header, body)):
                pool = self.cpu_pool             # (a heavy Metadata creates its topics there)
            elif key == ApiKey.METADATA and self._may_create(body):
                pool = self._io_pool
            else:
                return _answer(handler, self, conn, header, body)
            return await self.loop.run_in_executor(pool, _answer, handler, self, conn, header, body)
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

    def sasl_config(self, listener: Listener) -> sasl.SaslConfig:
        """A SASL listener's settings (ConfigError names a key that cannot work)."""
        found = self._sasl_configs.get(listener.name)
        if found is None:
            found = self._sasl_configs[listener.name] = sasl.SaslConfig.of(self.server_config, listener)
        return found

    def api_versions_response(self, error: int):
        return admin.api_versions_response(error)

    def _reconfigure(self, dynamic: dict[str, str]) -> None:
        """The store's dynamic values of the broker's dynamic keys changed (KIP-226)."""
        self.server_config = ServerConfig({**self.static_server_config, **dynamic})
        self._sasl_configs = {}


class _Serve:
    """A listener's stream callback (``client_connected_cb``): Broker._on_connection
    for a new connection. (A slotted object, not a closure: every connection's protocol
    holds it.)"""

    __slots__ = ("broker", "listener", "principal", "zero_copy")

    def __init__(self, broker: Broker, listener: Listener, principal: str = ANONYMOUS,
                 zero_copy: bool = True) -> None:
        self.broker = broker
        self.listener = listener
        self.principal = principal
        self.zero_copy = zero_copy

    def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker._on_connection(reader, writer, self.listener, self.principal, self.zero_copy)


class _GroupAnswer:
    """A group operation's ``respond``: sets the broker's future with the result, on the
    loop (directly when called there), once."""

    __slots__ = ("future", "loop_ident")

    def __init__(self, future: asyncio.Future, loop_ident: int | None) -> None:
        self.future = future
        self.loop_ident = loop_ident

    def __call__(self, result) -> None:
        if threading.get_ident() == self.loop_ident:
            _settle(self.future, result)
        else:
            try:
                self.future.get_loop().call_soon_threadsafe(_settle, self.future, result)
            except RuntimeError:                     # the loop is closed: nobody is waiting
                pass


def _settle(future: asyncio.Future, result) -> None:
    if not future.done():
        future.set_result(result)


def _answer(handler, broker: Broker, conn: Connection, header, body):
    """A handler's response, framed; None when there is none (acks=0 produce)."""
    if header.api_key in STORE_SIZED:
        _distinct_keys(header, body)
    started = time.perf_counter()
    response = handler(broker, conn, header, body)
    if broker.quotas.active:
        broker.quotas.throttle(conn, header, response, conn.request_bytes,
                               time.perf_counter() - started)
    return None if response is None else frame_response(header, response)


def _all_topics(header, req) -> bool:
    """A Metadata request for every topic: null topics, or none at v0."""
    return req.topics is None or (header.api_version == 0 and not req.topics)


def _distinct_keys(header, req) -> None:
    """Drops the repetitions of a key from an OffsetFetch (v8+ groups), DescribeGroups or
    DescribeConfigs request, keeping the first: a store-sized answer per distinct key,
    so a small request naming one key thousands of times cannot draw an answer
    thousands of times its size. Kafka answers each repetition (its Metadata
    reads topics into a set, as pylog's does); its clients never repeat one (Java's
    admin client keys them by name, librdkafka refuses duplicates), so the shorter
    answer costs them nothing."""
    key = header.api_key
    if key == ApiKey.OFFSET_FETCH and header.api_version >= 8:
        req.groups = _first_of_each(req.groups, lambda g: (g.group_id, None if g.topics is None else
                                    tuple((t.name, tuple(t.partition_indexes)) for t in g.topics)))
    elif key == ApiKey.DESCRIBE_GROUPS:
        req.groups = list(dict.fromkeys(req.groups))
    elif key == ApiKey.DESCRIBE_CONFIGS:
        req.resources = _first_of_each(req.resources, lambda r: (
            r.resource_type, r.resource_name,
            None if r.configuration_keys is None else tuple(r.configuration_keys)))


def _first_of_each(items: list, key) -> list:
    seen: dict = {}
    for item in items:
        seen.setdefault(key(item), item)
    return list(seen.values())


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"
