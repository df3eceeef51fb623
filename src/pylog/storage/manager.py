"""LogManager: every partition of a store, over one or more log dirs (JBOD).

``LogManager(log_dirs, config)`` opens (or creates) the log dirs, one per
disk, and loads every partition in them; ``close()`` shuts down cleanly.
In between it owns:

- **topics** (:mod:`.topic_admin`): create, delete, list, describe, alter config, add
  partitions; the topic table is persisted in every log dir (``pylog-topics.json``);
- **placement**: a new partition goes to the online dir with the fewest
  partitions; each dir has its own I/O engine;
- **startup**: the clean-shutdown marker is deleted before loading, logs
  load in parallel (``num.recovery.threads.per.data.dir`` per dir) from
  the checkpointed recovery points, and one summary line is logged;
- **background work** on one thread (:mod:`pylog.background`): flusher,
  time-based roll and retention, delayed file deletion, checkpoints;
- **log-dir moves** (:mod:`.log_dir_moves`, Kafka's KIP-113): a partition moves to
  another dir while it is written, through a ``-future`` dir, crash-safe;
- **offline dirs**: an I/O error takes its dir offline (its partitions
  raise KafkaStorageError, code 56), the other dirs keep serving;
- **dynamic broker configs** (Kafka's KIP-226, :mod:`.dynamic_config`): ``log.``
  defaults and cleaner sizes changed at run time, per node or cluster-wide, persisted
  in every dir (``pylog-broker-configs.json``) and applied to live logs at once;
- **SCRAM credentials** (:mod:`.scram_credentials`): users' salted keys for the
  broker's SASL/SCRAM, persisted in every dir (``pylog-scram-credentials.json``);
- **ACLs and client quotas** (:mod:`.acls`, :mod:`.client_quotas`): the broker's
  authorizer's bindings and quota overrides, persisted in every dir
  (``pylog-acls.json``, ``pylog-client-quotas.json``);
- **services for the layers above**: producer ids (InitProducerId), internal
  topics, periodic tasks (the group coordinator uses them).

Kafka's files and their bytes: docs/FORMAT.md, section 11.

Each job in its own module is an object the LogManager owns (``_topic_admin``,
``_log_dir_moves``, ``_dynamic_configs``, ``_scram_credentials``, ``_acls``,
``_client_quotas``): it keeps that job's state and sees the store only through
the host it was given (:class:`~.topic_admin.TopicHost`,
:class:`~.log_dir_moves.MoveHost`, :class:`~.dir_tables.TableDirs`: bound
methods and the partition maps); the LogManager's public methods delegate to
it. Opening is one too: a :class:`~.startup.StoreLoader`, through a
:class:`~.startup.StartupHost`, fills the partition maps once and is dropped.

Thread safety: every public method may be called from any thread. Topic
changes are serialised by one lock; ``log()`` takes none. Logs serialise
their own appends.
"""

from __future__ import annotations

import concurrent.futures
import errno as errno_mod
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pylog.common.acl import AclBinding, AclFilter
from pylog.common.config import ConfigDef
from pylog.common.scram import ScramCredential
from pylog.errors import (
    ConfigError,
    CorruptCheckpointError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    PylogError,
    UnknownTopicOrPartitionError,
)

from . import budget, checkpoints, files
from .background import BackgroundTasks, wall_clock_ms
from .config import LONG_MAX, BrokerConfig, LogConfig
from .dynamic_config import DynamicConfigs
from .log import Log
from .log_dir import LogDir, process_limit_hint
from .log_dir_moves import LogDirDescription, LogDirMoves, MoveHost
from .producer_ids import ProducerIdAllocator
from .acls import AccessControlLists
from .client_quotas import ClientQuotas, Entity
from .scram_credentials import UserScramCredentials
from .startup import StartupHost, StartupReport, StoreLoader, Unavailable, dir_failed_at_startup
from .dir_tables import TableDirs
from .topic_admin import TopicAdmin, TopicHost
from .topics import TopicDescription

if TYPE_CHECKING:
    from .cleaner import CleanerStats

__all__ = ["LogManager", "StartupReport"]

log = logging.getLogger(__name__)


class _CleanerStopped(Exception):
    """Raised between a cleaning's steps when the store is closing."""

TopicPartition = tuple[str, int]

def _as_dir_list(log_dirs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    if isinstance(log_dirs, str | os.PathLike):
        text = os.fspath(log_dirs)
        return [p.strip() for p in text.split(",") if p.strip()]
    return [os.fspath(p) for p in log_dirs]


class LogManager:
    """The store: ``LogManager(log_dirs, config=None)``.

    ``log_dirs``: a path, a comma-separated string (Kafka's ``log.dirs``) or a
    list of paths, one per disk; when None, ``log.dirs`` / ``log.dir`` from
    `config`. ``config``: broker configs (``num.recovery.threads.per.data.dir``,
    ``log.retention.check.interval.ms``, ...) and topic defaults under Kafka's
    ``log.`` names (``log.retention.ms``, ``log.segment.bytes``, ...);
    keyword arguments may spell keys with underscores.

    ``clock`` (ms since the epoch) is injectable; with ``background=False``
    no thread is started and :meth:`run_background_tasks` runs whatever is
    due by the clock (tests advance a fake clock and call it).
    """

    def __init__(self, log_dirs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
                 config: Mapping[str, Any] | None = None, *, clock: Callable[[], int] | None = None,
                 background: bool = True, **kwargs: Any) -> None:
        given = {**dict(config or {}), **kwargs}
        self.config = BrokerConfig(given)        # static; replaced by dynamic configs (KIP-226)
        self.defaults: LogConfig = self.config.log_config
        self._lock = threading.RLock()             # topic table and the partition maps
        # The tables kept in every log dir, each by a keeper that sees the store only
        # through this (dir_tables.TableDirs).
        self._table_dirs = TableDirs(self._lock, self._check_open, self._online_dirs,
                                     self._fail_dir, dir_failed_at_startup)
        self._dynamic_configs = DynamicConfigs(
            self._table_dirs, given,
            lambda: {n: t.config for n, t in self._topic_admin.table.topics.items()},
            self._apply_broker_config)
        self._scram_credentials = UserScramCredentials(self._table_dirs)
        self._acls = AccessControlLists(self._table_dirs)
        self._client_quotas = ClientQuotas(self._table_dirs)
        if log_dirs is None:
            log_dirs = self.config["log.dirs"] or (self.config["log.dir"],)
        paths = _as_dir_list(log_dirs)
        if not paths:
            raise ConfigError("log.dirs is empty: give at least one log directory")
        seen: dict[str, str] = {}
        for p in paths:
            real = os.path.realpath(p)
            if real in seen:
                raise ConfigError(f"log.dirs names the same directory twice: {seen[real]!r} and {p!r}")
            seen[real] = p
        self.clock = clock or wall_clock_ms
        self.dirs = [LogDir(p) for p in paths]
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, LogDir] = {}
        # Partitions of the topic table that are not open, and why (startup.py).
        self._unavailable: dict[TopicPartition, Unavailable] = {}
        self._failure_threads: list[threading.Thread] = []
        self._closed = False
        self._closing = False
        self._tasks = BackgroundTasks(self.clock, name="pylog-log-manager",
                                      poll_s=self.config["pylog.background.poll.ms"] / 1000)
        self._log_dir_moves = LogDirMoves(MoveHost(
            self._lock, self.dirs, self._logs, self._dir_of, self._check_open, self.log,
            self._open_log, self._log_moved, self._tasks.schedule))
        #: Grows with every topic change (create, delete, add partitions, alter): the
        #: layers above compare it to notice metadata changes without listing topics. A
        #: plain attribute, set with the table (topic_admin.TopicAdmin.install).
        self.topic_epoch = 0
        self._topic_admin = TopicAdmin(TopicHost(
            self._table_dirs, self.dirs, self._logs, self._dir_of, self._unavailable,
            lambda: self.config, self._make_config, self._open_log, self._guard,
            self._write_checkpoints, self._tasks.schedule, self._log_dir_moves.cancel,
            self._publish_topic_epoch))
        #: The same epoch in a one-item int64 array, written in place: the producer
        #: reads it in C once per send().
        self.topic_epoch_cell = self._topic_admin.epoch_cell
        if self.config["pylog.raise.open.files.limit"]:
            budget.raise_open_files_limit()
        loader = StoreLoader(StartupHost(
            self.dirs, self._logs, self._dir_of, self._unavailable, self._table_dirs,
            self._topic_admin, lambda: self.config, self._load_dir_tables, self._make_config,
            self._open_log, self._offline_error, self._write_checkpoints, self._online_dirs))
        try:
            self.startup = loader.open()
        except BaseException:
            self._abort_open()
            raise
        self.cluster_id = loader.cluster_id
        self._producer_ids = ProducerIdAllocator([d.path for d in self._online_dirs()],
                                                 self._largest_producer_id())
        log.info(self.startup.summary())
        self._log_dir_states()
        self._schedule_periodic_work()
        self._log_dir_moves.resume(loader.resumable_moves)
        self._cleaner_offsets = {d.path: self._read_cleaner_checkpoint(d) for d in self._online_dirs()}
        self._cleaning = threading.Lock()           # one cleaning at a time
        self._cleaner_stop = threading.Event()
        self._cleaner_thread: threading.Thread | None = None
        self._last_cleaning: CleanerStats | None = None
        self._cleanings = 0
        if background:
            self._tasks.start()
            if self.config["log.cleaner.enable"]:
                self._cleaner_thread = threading.Thread(target=self._cleaner_loop,
                                                        name="pylog-log-cleaner", daemon=True)
                self._cleaner_thread.start()

    def _load_dir_tables(self) -> None:
        """At open, after the topic table: the dynamic broker configs (KIP-226, before
        any topic config is built), then SCRAM credentials, ACLs and client quotas."""
        config = self._dynamic_configs.load()
        if config is not None:
            self.config, self.defaults = config, config.log_config
        self._scram_credentials.load()
        self._acls.load()
        self._client_quotas.load()

    def _abort_open(self) -> None:
        self._tasks.shutdown()
        for lg in self._logs.values():
            lg.abandon()
        for d in self.dirs:
            d.unlock()

    def _log_dir_states(self) -> None:
        """One INFO line per log dir at start: its state, what the last shutdown left,
        its partitions, free space and the I/O engine its partitions use."""
        for d in self.dirs:
            if not d.online:
                log.error("log dir %s: OFFLINE (%s)", d.path, d.offline_reason)
                continue
            partitions = sum(1 for owner in self._dir_of.values() if owner is d)
            try:
                st = os.statvfs(d.path)
                free = f"{st.f_bavail * st.f_frsize / 2**30:.1f} GiB free"
            except OSError as exc:
                free = f"free space unknown ({exc.strerror})"
            log.info("log dir %s: online, %s, %d partitions, %s; I/O engine: %s", d.path,
                     "clean shutdown" if d.had_clean_shutdown else "no clean-shutdown marker "
                     "(new or recovered)", partitions, free, d.engine_description())

    # =============================================================== cleaner

    def _read_cleaner_checkpoint(self, d: LogDir) -> dict[TopicPartition, int]:
        try:
            return d.read_checkpoint(files.CLEANER_OFFSET_CHECKPOINT_FILE)
        except FileNotFoundError:
            return {}
        except CorruptCheckpointError as exc:
            log.warning("%s; every compacted log of %s is cleaned from its start", exc, d.path)
            return {}

    def clean_once(self, now: int | None = None, stage=None) -> CleanerStats | None:
        """One step of the log cleaner (Kafka's CleanerThread): cleans the dirtiest
        log whose cleanup.policy includes compact and whose dirty ratio reaches
        min.cleanable.dirty.ratio (or whose dirty data is older than
        max.compaction.lag.ms, which also rolls an active segment that old), then
        records the new first dirty offset in its dir's cleaner-offset-checkpoint.
        Returns the stats, or None when no log needed cleaning."""
        now = self.clock() if now is None else now
        with self._cleaning:
            best = None
            for tp, lg in self._live_logs():
                config = lg.config
                if "compact" not in config.cleanup_policy or lg.offline or lg.closed:
                    continue
                # Here, not at the top: the cleaner imports numpy and pyarrow, which
                # a store with no compacted log (and pylog's commands) never needs.
                from .cleaner import clean_log, cleanable_range, dirty_ratio
                d = self._dir_of.get(tp)
                if d is None or not d.online:
                    continue
                first_dirty = max(self._cleaner_offsets.get(d.path, {}).get(tp, 0),
                                  lg.log_start_offset)
                max_lag = config.max_compaction_lag_ms
                active = lg.segments[-1]
                if max_lag < LONG_MAX and active.size and active.rolling_based_timestamp >= 0 \
                        and now - active.rolling_based_timestamp > max_lag:
                    lg.roll()                      # max.compaction.lag.ms: make it cleanable
                clean, dirty = cleanable_range(lg.segments, first_dirty, now,
                                               config.min_compaction_lag_ms,
                                               lg.last_stable_offset)
                if not dirty:
                    continue
                ratio = dirty_ratio(clean, dirty)
                overdue = max_lag < LONG_MAX and now - dirty[0].largest_timestamp > max_lag
                if ratio < config.min_cleanable_dirty_ratio and not overdue:
                    continue
                if best is None or ratio > best[0]:
                    best = (ratio, tp, lg, d, first_dirty)
            if best is None:
                return None
            _, tp, lg, d, first_dirty = best
            c = self.config
            try:
                stats = clean_log(lg, first_dirty, now, c["log.cleaner.dedupe.buffer.size"],
                                  c["log.cleaner.io.max.bytes.per.second"], stage)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) or lg.closed or lg.offline:
                    # Retention, a truncation or a topic deletion took a segment (or the
                    # whole log) away under the cleaner: not a disk failure.
                    log.info("cleaning %s-%d stopped: %s (the log changed under it)",
                             tp[0], tp[1], exc)
                    return None
                self._fail_dir(d, exc, f"cleaning {tp[0]}-{tp[1]}")
                raise
            if stats is None:
                return None
            offsets = self._cleaner_offsets.setdefault(d.path, {})
            offsets[tp] = stats.end_offset
            live = {t for t, _ in self._live_logs() if self._dir_of.get(t) is d}
            try:
                d.write_checkpoint(files.CLEANER_OFFSET_CHECKPOINT_FILE,
                                   {t: o for t, o in offsets.items() if t in live})
            except OSError as exc:
                self._fail_dir(d, exc, "writing the cleaner-offset-checkpoint")
            log.info("%s", stats.summary())
            self._last_cleaning = stats
            self._cleanings += 1
            return stats

    def _cleaner_loop(self) -> None:
        def stage(name: str) -> None:
            if name == "group" and self._cleaner_stop.is_set():     # between groups only
                raise _CleanerStopped()
        while not self._cleaner_stop.is_set():
            try:
                stats = self.clean_once(stage=stage)
            except _CleanerStopped:
                return
            except (KafkaStorageError, OSError, ValueError, NotLeaderOrFollowerError) as exc:
                # (NotLeaderOrFollowerError: its log moved to another dir while it cleaned)
                log.warning("the log cleaner skipped a pass: %s", exc)
                stats = None
            except Exception:  # noqa: BLE001 - a cleaner bug must not kill the store
                log.exception("the log cleaner failed; it retries after log.cleaner.backoff.ms")
                stats = None
            if stats is None:       # read each time: log.cleaner.backoff.ms is dynamic
                self._cleaner_stop.wait(self.config["log.cleaner.backoff.ms"] / 1000)

    # ================================================================ configs

    def _engine(self, d: LogDir, config: LogConfig):
        kind = config.pylog_io_engine
        try:
            return d.engine(kind, self.config["pylog.io.queue.depth"])
        except OSError as exc:
            raise ConfigError(f"pylog.io.engine = {kind!r} is unavailable here: {exc}") from None

    def _make_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig(overrides, defaults=self.defaults)

    def _open_log(self, d: LogDir, tp: TopicPartition, path: str, config: LogConfig, *,
                  recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> Log:
        """A Log of this store on `path` in `d`: its dir's engine, the store's clock and
        scheduler, and I/O errors that take `d` offline (loading, creating, moving)."""
        return Log(path, config, engine=self._engine(d, config), clock=self.clock,
                   scheduler=self._tasks, recovery_point=recovery_point,
                   log_start_offset=log_start_offset, clean_shutdown=clean_shutdown,
                   on_io_error=self._io_error_handler(d, tp), topic_partition=tp)

    def _apply_broker_config(self, config: BrokerConfig, topic_configs: dict[str, LogConfig]) -> None:
        """A dynamic config change (the lock held): the store's config, then each topic's
        config that changed, to its live logs."""
        self.config = config
        self.defaults = config.log_config
        for name, topic_config in topic_configs.items():
            if self._topic_admin.configs.get(name) != topic_config:
                self._topic_admin.configs[name] = topic_config
                for p in range(self._topic_admin.table.topics[name].partitions):
                    lg = self._logs.get((name, p))
                    if lg is not None and not lg.offline:
                        lg.update_config(topic_config)

    # ================================================= dynamic broker configs
    # (dynamic_config.DynamicConfigs: the methods' documentation is there)

    @property
    def static_config(self) -> dict[str, Any]:
        """The config the store was opened with (Kafka's STATIC_BROKER_CONFIG), as given."""
        return self._dynamic_configs.static_config

    @property
    def dynamic_broker_configs(self) -> dict[str, dict[str, str]]:
        return self._dynamic_configs.dynamic_broker_configs

    def dynamic_config_keys(self) -> dict[str, ConfigDef]:
        return self._dynamic_configs.dynamic_config_keys()

    def alter_broker_configs(self, level: str, configs: Mapping[str, Any], *,
                             validate_only: bool = False) -> None:
        self._dynamic_configs.alter_broker_configs(level, configs, validate_only=validate_only)

    def add_reconfigurable(self, defs: Mapping[str, ConfigDef],
                           on_change: Callable[[dict[str, str]], None]) -> None:
        self._dynamic_configs.add_reconfigurable(defs, on_change)

    def remove_reconfigurable(self, on_change: Callable[[dict[str, str]], None]) -> None:
        self._dynamic_configs.remove_reconfigurable(on_change)

    # ==================================================== SCRAM credentials
    # (scram_credentials.UserScramCredentials)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram_credentials.scram_credential(user, mechanism)

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, dict[str, int] | PylogError]:
        return self._scram_credentials.describe_user_scram_credentials(users)

    def alter_user_scram_credentials(
            self, deletions: Iterable[tuple[str, str | int]] = (),
            upsertions: Iterable[tuple[str, str | int, ScramCredential]] = (),
    ) -> dict[str, PylogError | None]:
        return self._scram_credentials.alter_user_scram_credentials(deletions, upsertions)

    # ============================================================== ACLs
    # (acls.AccessControlLists)

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        return self._acls.acls

    @property
    def acl_epoch(self) -> int:
        return self._acls.acl_epoch

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return self._acls.describe_acls(acl_filter)

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[PylogError | None]:
        return self._acls.create_acls(bindings)

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding] | PylogError]:
        return self._acls.delete_acls(filters)

    # ======================================================== client quotas
    # (client_quotas.ClientQuotas)

    @property
    def client_quotas(self) -> dict[Entity, dict[str, float]]:
        return self._client_quotas.client_quotas

    @property
    def client_quota_epoch(self) -> int:
        return self._client_quotas.client_quota_epoch

    def describe_client_quotas(self, components: list[tuple[str, int, str | None]],
                               strict: bool) -> dict[Entity, dict[str, float]]:
        return self._client_quotas.describe_client_quotas(components, strict)

    def alter_client_quotas(self, entries, validate_only: bool = False) -> list[PylogError | None]:
        return self._client_quotas.alter_client_quotas(entries, validate_only)

    # =============================================================== topics
    # (topic_admin.TopicAdmin: the methods' documentation is there)

    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, Any] | None = None, *, replication_factor: int = -1,
                     validate_only: bool = False) -> TopicDescription | None:
        return self._topic_admin.create_topic(name, partitions, config,
                                              replication_factor=replication_factor,
                                              validate_only=validate_only)

    def delete_topic(self, name: str) -> None:
        self._topic_admin.delete_topic(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return self._topic_admin.list_topics(include_internal)

    def describe_topic(self, name: str) -> TopicDescription:
        return self._topic_admin.describe_topic(name)

    def topic_config(self, name: str) -> LogConfig:
        """The topic's configuration in effect (its overrides over the store's defaults)."""
        return self._topic_admin.topic_config(name)

    def alter_topic_config(self, name: str, config: Mapping[str, Any], *, replace: bool = False,
                           validate_only: bool = False) -> TopicDescription | None:
        return self._topic_admin.alter_topic_config(name, config, replace=replace,
                                                    validate_only=validate_only)

    def create_partitions(self, name: str, total: int, *,
                          validate_only: bool = False) -> TopicDescription | None:
        return self._topic_admin.create_partitions(name, total, validate_only=validate_only)

    def auto_create_topic(self, name: str) -> TopicDescription:
        return self._topic_admin.auto_create_topic(name)

    def partition_count(self, topic: str) -> int | None:
        return self._topic_admin.partition_count(topic)

    def topic_id(self, topic: str) -> str | None:
        return self._topic_admin.topic_id(topic)

    def ensure_internal_topic(self, name: str, partitions: int, config: Mapping[str, Any]) -> int:
        return self._topic_admin.ensure_internal_topic(name, partitions, config)

    def check_partitions_per_request(self, adding: int, what: str = "Excessively large number of "
                                     "partitions per request") -> None:
        self._topic_admin.check_partitions_per_request(adding, what)

    def _publish_topic_epoch(self, epoch: int) -> None:
        self.topic_epoch = epoch

    # ======================================================== log-dir moves
    # (log_dir_moves.LogDirMoves: the methods' documentation is there)

    def log_dir_of(self, topic: str, partition: int) -> str:
        return self._log_dir_moves.log_dir_of(topic, partition)

    def describe_log_dirs(self, partitions=None) -> list[LogDirDescription]:
        return self._log_dir_moves.describe_log_dirs(partitions)

    def alter_log_dir(self, topic: str, partition: int, log_dir: str) -> bool:
        return self._log_dir_moves.alter_log_dir(topic, partition, log_dir)

    def moving(self, topic: str, partition: int) -> str | None:
        return self._log_dir_moves.moving(topic, partition)

    def last_log_dir_move(self, topic: str, partition: int):
        return self._log_dir_moves.last_move(topic, partition)

    def _log_moved(self, tp: TopicPartition, source: LogDir, dest: LogDir) -> None:
        """After a move's swap (the lock held): its cleaner offset follows it, and both
        dirs' checkpoints are written."""
        cleaned = self._cleaner_offsets.get(source.path, {}).pop(tp, None)
        if cleaned is not None:
            self._cleaner_offsets.setdefault(dest.path, {})[tp] = cleaned
        for d in (source, dest):
            if d.online:
                self._write_checkpoints(d)

    # ========================================================= offline dirs

    def _offline_error(self, d: LogDir) -> KafkaStorageError:
        return KafkaStorageError(errno_mod.EIO, f"log dir {d.path} is offline: {d.offline_reason}",
                                 d.path)

    def _io_error_handler(self, d: LogDir, tp: TopicPartition) -> Callable[[OSError], None]:
        def handle(exc: OSError) -> None:
            if self._closing and not d.online:
                return
            self._fail_dir(d, exc, f"{tp[0]}-{tp[1]}")
        return handle

    def _fail_dir(self, d: LogDir, exc: OSError, where: str) -> None:
        """Takes `d` offline (Kafka's LogDirFailureChannel). Safe to call while any
        Log lock is held: it only sets flags here, and a separate thread closes
        the dir's files and releases its lock.

        **Divergence:** running out of file descriptors or memory (EMFILE,
        ENFILE, ENOMEM) is a limit of this process, not a failure of the disk:
        the operation fails with KafkaStorageError but the dir stays online
        (Kafka takes the dir offline for any IOException)."""
        name = errno_mod.errorcode.get(exc.errno or 0, "")
        hint = process_limit_hint(exc)
        if hint is not None:
            log.error("%s in log dir %s failed: %s (%s); the dir stays online: %s",
                      where, d.path, exc, name, hint)
            return
        reason = f"{where}: {exc.strerror or exc} ({name})" if name else f"{where}: {exc}"
        if not d.mark_offline(reason):
            return
        error = self._offline_error(d)
        doomed = [lg for tp, lg in list(self._logs.items()) if self._dir_of.get(tp) is d]
        for lg in doomed:
            lg.mark_offline(error)
        online = self._online_dirs()
        log.error("log dir %s is offline (%s); its %d partitions are unavailable; %d of %d log "
                  "dirs remain online", d.path, reason, len(doomed), len(online), len(self.dirs))
        if not online:
            log.critical("every log dir is offline: the store can no longer serve anything")

        def release() -> None:
            for lg in doomed:
                lg.abandon()
            d.unlock()
        thread = threading.Thread(target=release, name=f"pylog-log-dir-failure-{d.path}", daemon=True)
        self._failure_threads.append(thread)
        thread.start()

    def _guard(self, d: LogDir, where: str, action: Callable[[], Any]) -> Any:
        """Runs `action`; an OSError takes `d` offline and is raised as KafkaStorageError."""
        try:
            return action()
        except KafkaStorageError:
            raise
        except OSError as exc:
            self._fail_dir(d, exc, where)
            hint = process_limit_hint(exc)
            raise KafkaStorageError(exc.errno or errno_mod.EIO,
                                    f"{where} failed in log dir {d.path}: {exc}"
                                    + (f": {hint}" if hint else ""), d.path) from exc

    def _online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    @property
    def log_dirs(self) -> list[str]:
        return [d.path for d in self.dirs]

    @property
    def offline_log_dirs(self) -> dict[str, str]:
        """Offline dir -> why it went offline."""
        return {d.path: d.offline_reason or "" for d in self.dirs if not d.online}

    # =============================================================== topics

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this LogManager is closed")
        if not self._online_dirs():
            raise KafkaStorageError(errno_mod.EIO, "every log dir is offline: " + "; ".join(
                f"{d.path}: {d.offline_reason}" for d in self.dirs))

    def log(self, topic: str, partition: int) -> Log:
        """The Log of one partition. UnknownTopicOrPartitionError if it does not
        exist; KafkaStorageError if its log dir is offline."""
        if self._closed:
            raise ValueError("this LogManager is closed")
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise TypeError(f"partition must be an int, not {type(partition).__name__} "
                            f"{partition!r}")
        tp = (topic, partition)
        lg = self._logs.get(tp)
        if lg is not None:
            d = self._dir_of.get(tp)
            if d is not None and not d.online:
                raise self._offline_error(d)
            if lg.offline:
                lg._check_open()
            return lg
        t = self._topic_admin.table.topics.get(topic)
        if t is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        failed = self._unavailable.get(tp)
        if failed is not None:
            where = failed.log_dir.path if failed.log_dir else None
            raise KafkaStorageError(errno_mod.EIO, f"partition {topic}-{partition} is offline: "
                                    f"{failed.reason}", where)
        if not 0 <= partition < t.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{t.partitions - 1}, "
                                               f"not {partition}")
        offline = [d for d in self.dirs if not d.online]
        raise KafkaStorageError(errno_mod.EIO, f"partition {topic}-{partition} is offline: it is in "
                                f"none of the online log dirs; offline: "
                                + ", ".join(f"{d.path} ({d.offline_reason})" for d in offline))

    # ======================================================= background work

    def _schedule_periodic_work(self) -> None:
        c = self.config
        self._tasks.add_periodic("flusher", c["log.flush.scheduler.interval.ms"], self._flush_due)
        self._tasks.add_periodic("retention", c["log.retention.check.interval.ms"], self._retention)
        self._tasks.add_periodic("recovery-point-checkpoint",
                                 self.defaults.pylog_recovery_point_checkpoint_interval_ms,
                                 lambda now: self._checkpoint_all(files.RECOVERY_POINT_CHECKPOINT_FILE))
        self._tasks.add_periodic("log-start-offset-checkpoint",
                                 c["log.flush.start.offset.checkpoint.interval.ms"],
                                 lambda now: self._checkpoint_all(files.LOG_START_OFFSET_CHECKPOINT_FILE))

    def _live_logs(self) -> list[tuple[TopicPartition, Log]]:
        return [(tp, lg) for tp, lg in list(self._logs.items())
                if not lg.offline and not lg.closed and self._dir_of[tp].online]

    def _flush_due(self, now: int) -> None:
        """The flusher: each log whose ``flush.ms`` has passed is flushed."""
        for _, lg in self._live_logs():
            try:
                lg.maybe_flush()
            except (KafkaStorageError, ValueError):
                pass     # its dir went offline (reported) or it was deleted meanwhile

    def _retention(self, now: int) -> None:
        """Time-based roll, then retention (``retention.ms``, ``retention.bytes``, log
        start offset) for every log whose cleanup.policy includes delete."""
        for _, lg in self._live_logs():
            try:
                lg.maybe_roll_by_time()
                if "delete" in lg.config.cleanup_policy:
                    lg.apply_retention(now)
            except (KafkaStorageError, ValueError):
                pass     # its dir went offline (reported) or it was deleted meanwhile

    def _checkpoint_all(self, which: str | None = None) -> None:
        for d in self._online_dirs():
            self._write_checkpoints(d, which)

    def _write_checkpoints(self, d: LogDir, which: str | None = None) -> bool:
        logs = [(tp, lg) for tp, lg in list(self._logs.items())
                if self._dir_of.get(tp) is d and not lg.offline]
        unavailable = {tp: v for tp, v in list(self._unavailable.items()) if v.log_dir is d}
        try:
            if which in (None, files.RECOVERY_POINT_CHECKPOINT_FILE):
                entries = {tp: v.recovery_point for tp, v in unavailable.items()}
                entries.update((tp, lg.recovery_point) for tp, lg in logs)
                d.write_checkpoint(files.RECOVERY_POINT_CHECKPOINT_FILE, entries)
            if which in (None, files.LOG_START_OFFSET_CHECKPOINT_FILE):
                entries = {tp: v.log_start_offset for tp, v in unavailable.items()}
                entries.update((tp, lg.log_start_offset) for tp, lg in logs)
                d.write_checkpoint(files.LOG_START_OFFSET_CHECKPOINT_FILE, entries)
        except OSError as exc:
            self._fail_dir(d, exc, "writing checkpoints")
            return False
        return True

    def metrics(self) -> dict:
        """The store's figures with Kafka's metric names (docs/ARCHITECTURE.md, "Metrics"):
        ``{"OfflineLogDirectoryCount": n, "PartitionCount": n, "LogFlushRateAndTimeMs":
        {"count", "total_ms"}, "LogCleaner": {"max-clean-time-secs", "cleaner-recopy-percent",
        "max-buffer-utilization-percent", "max-dirty-percent", "DeadThreadCount",
        "cleanings"}, "topics": {topic: {"MessagesIn", "BytesIn"}}, "partitions":
        {(topic, p): {"Size", "LogEndOffset", "LogStartOffset", "NumLogSegments"}}}``.
        Read from counters the append and flush paths keep anyway: no cost on them."""
        partitions, topics = {}, {}
        flushes, flush_ms = 0, 0.0
        for (topic, partition), lg in self._live_logs():
            segments = lg.segments
            partitions[(topic, partition)] = {
                "Size": sum(seg.size for seg in segments), "LogEndOffset": lg.log_end_offset,
                "LogStartOffset": lg.log_start_offset, "NumLogSegments": len(segments)}
            t = topics.setdefault(topic, {"MessagesIn": 0, "BytesIn": 0})
            t["MessagesIn"] += lg.records_appended
            t["BytesIn"] += lg.bytes_appended
            flushes += lg.flushes
            flush_ms += lg.flush_ms_total
        last = self._last_cleaning
        cleaner = {  # Kafka's LogCleaner / LogCleanerManager gauges, of the last cleaning
            "max-clean-time-secs": last.seconds if last else 0.0,
            "cleaner-recopy-percent": 100 * last.bytes_written / max(last.bytes_read, 1)
            if last else 0.0,
            "max-buffer-utilization-percent": 100 * last.map_fill if last else 0.0,
            "max-dirty-percent": 100 * last.dirty_ratio_before if last else 0.0,
            "DeadThreadCount": int(self._cleaner_thread is not None
                                   and not self._cleaner_thread.is_alive()
                                   and not self._cleaner_stop.is_set()),
            "cleanings": self._cleanings}
        return {"OfflineLogDirectoryCount": len(self.offline_log_dirs),
                "PartitionCount": len(partitions),
                "LogFlushRateAndTimeMs": {"count": flushes, "total_ms": flush_ms},
                "LogCleaner": cleaner, "topics": topics, "partitions": partitions}

    def run_background_tasks(self) -> int:
        """Runs every background task that is due by the clock, now, on this thread
        (for tests with an injected clock and ``background=False``). Returns how
        many ran."""
        return self._tasks.run_due()

    def checkpoint(self) -> None:
        """Writes both checkpoint files of every online dir now."""
        self._checkpoint_all()

    # ============================================================= services

    def init_producer_id(self) -> tuple[int, int]:
        """(producer_id, epoch) for a new idempotent producer (Kafka's InitProducerId):
        an id no producer of this store had before, epoch 0."""
        self._check_open()
        return self._producer_ids.allocate([d.path for d in self._online_dirs()]), 0

    def _largest_producer_id(self) -> int:
        """The largest producer id in the producer state of every loaded log (-1: none),
        which Kafka-written logs fill from their snapshots and batches."""
        ids = [max(lg.producer_state.producers, default=-1) for lg in list(self._logs.values())]
        return max(ids, default=-1)

    def producer_id_handed_out(self, producer_id: int) -> bool:
        """Whether :meth:`init_producer_id` ever returned `producer_id` (in this process
        or before it: every id below the recorded next block counts)."""
        return self._producer_ids.handed_out(producer_id)

    def add_periodic_task(self, name: str, interval_ms: int, task: Callable[[int], None]) -> None:
        """Runs ``task(now_ms)`` every `interval_ms` on the store's background thread
        (or from :meth:`run_background_tasks`). The task must not raise."""
        self._tasks.add_periodic(name, interval_ms, task)

    # ============================================================== lifecycle

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Clean shutdown: stops the background thread, closes (trims and flushes)
        every log, writes the checkpoints and then the clean-shutdown marker of
        each dir that had no error, and releases the locks."""
        if not self._closed:
            self._log_dir_moves.stop()
        self._cleaner_stop.set()
        if self._cleaner_thread is not None:
            self._cleaner_thread.join()
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._tasks.shutdown()
            for thread in list(self._failure_threads):
                thread.join()
            by_dir: dict[str, list[Log]] = {}
            for tp, lg in self._logs.items():
                by_dir.setdefault(self._dir_of[tp].path, []).append(lg)

            def close_dir(d: LogDir) -> None:
                logs = by_dir.get(d.path, [])
                threads = self.config["num.recovery.threads.per.data.dir"]
                with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                    results = list(pool.map(self._close_log, logs))
                errors = [r for r in results if r is not None]
                if errors or not d.online:
                    if errors:
                        self._fail_dir(d, errors[0], "closing its logs")
                    return
                if self._write_checkpoints(d):
                    try:
                        checkpoints.write_clean_shutdown(d.path)
                    except OSError as exc:
                        self._fail_dir(d, exc, "writing the clean-shutdown marker")

            threads = [threading.Thread(target=close_dir, args=(d,), name=f"pylog-close-{i}")
                       for i, d in enumerate(self.dirs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for thread in list(self._failure_threads):
                thread.join()
            for d in self.dirs:
                d.unlock()
            self._closed = True

    @staticmethod
    def _close_log(lg: Log) -> OSError | None:
        if lg.offline:
            lg.abandon()
            return None
        try:
            lg.close()
        except OSError as exc:
            lg.abandon()
            return exc
        return None

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LogManager({self.log_dirs!r}, topics={len(self._topic_admin.table.topics)}, "
                f"partitions={len(self._logs)}, offline_dirs={len(self.offline_log_dirs)})")
