"""LogManager: every partition of a store, over one or more log dirs (JBOD).

``LogManager(log_dirs, config)`` opens (or creates) the log dirs, one per
disk, and loads every partition in them; ``close()`` shuts down cleanly.
In between it owns:

- **topics**: create, delete, list, describe, alter config, add partitions;
  the topic table is persisted in every log dir (``pylog-topics.json``);
- **placement**: a new partition goes to the online dir with the fewest
  partitions; each dir has its own I/O engine;
- **startup**: the clean-shutdown marker is deleted before loading, logs
  load in parallel (``num.recovery.threads.per.data.dir`` per dir) from
  the checkpointed recovery points, and one summary line is logged;
- **background work** on one thread (:mod:`pylog.background`): flusher,
  time-based roll and retention, delayed file deletion, checkpoints;
- **offline dirs**: an I/O error takes its dir offline (its partitions
  raise KafkaStorageError, code 56), the other dirs keep serving;
- **committed offsets** in ``__consumer_offsets`` (:mod:`pylog.offsets`).

Kafka's files and their bytes: docs/FORMAT.md, section 11.

Thread safety: every public method may be called from any thread. Topic
changes are serialised by one lock; ``log()`` takes none. Logs serialise
their own appends.
"""

from __future__ import annotations

import concurrent.futures
import copy
import errno as errno_mod
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import checkpoints, files
from .background import BackgroundTasks, wall_clock_ms
from .config import BrokerConfig, LogConfig, normalize_key
from .errors import (ConfigError, CorruptCheckpointError, InvalidPartitionsError,
                     InvalidReplicationFactorError, InvalidTopicError, KafkaStorageError,
                     PylogError, TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from .log import Log
from .log_dir import LogDir
from .offsets import OffsetAndMetadata, OffsetStore, encode_offset_key, encode_offset_value, \
    partition_for_group
from .producer_ids import ProducerIdAllocator
from .records import encode_batch
from .topics import (INTERNAL_TOPICS, OFFSETS_TOPIC, PartitionDescription, Topic,
                     TopicDescription, TopicTable, collision_key, config_to_strings,
                     validate_topic_name)

__all__ = ["LogManager", "StartupReport", "open"]

log = logging.getLogger("pylog.manager")

TopicPartition = tuple[str, int]

_PROCESS_LIMIT_ERRNOS = frozenset({errno_mod.EMFILE, errno_mod.ENFILE, errno_mod.ENOMEM})


@dataclass(frozen=True, slots=True)
class StartupReport:
    """What opening the store did (one line: :meth:`summary`)."""

    log_dirs: int
    offline_dirs: tuple[str, ...]
    clean_dirs: int                  # dirs that had the clean-shutdown marker
    partitions: int
    segments: int
    segments_recovered: int
    bytes_scanned: int
    bytes_truncated: int
    seconds: float

    def summary(self) -> str:
        offline = f"; OFFLINE: {', '.join(self.offline_dirs)}" if self.offline_dirs else ""
        return (f"pylog: loaded {self.partitions} partitions ({self.segments} segments) from "
                f"{self.log_dirs} log dirs in {self.seconds:.2f}s; clean shutdown in "
                f"{self.clean_dirs}/{self.log_dirs} dirs; recovered {self.segments_recovered} "
                f"segments, scanned {self.bytes_scanned} bytes, truncated {self.bytes_truncated} "
                f"bytes{offline}")


class _Progress:
    """A one-line progress bar on stderr, shown only on a terminal and only once
    loading has taken more than a second."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.shown = False
        self.enabled = total > 0 and sys.stderr.isatty()
        self._lock = threading.Lock()

    def step(self) -> None:
        with self._lock:
            self.done += 1
            if not self.enabled:
                return
            elapsed = time.monotonic() - self.started
            if elapsed < 1.0 or (self.done % 16 and self.done != self.total):
                return
            width = 30
            filled = width * self.done // self.total
            sys.stderr.write(f"\rpylog: loading logs [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total} partitions, {elapsed:.1f}s")
            sys.stderr.flush()
            self.shown = True

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


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
        self.config = BrokerConfig({**dict(config or {}), **kwargs})
        self.defaults: LogConfig = self.config.log_config
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
        self._lock = threading.RLock()             # topic table and the partition maps
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, LogDir] = {}
        self._topics = TopicTable()
        self._topic_configs: dict[str, LogConfig] = {}
        self._offsets = OffsetStore()
        self._offsets_lock = threading.Lock()
        self._failure_threads: list[threading.Thread] = []
        self._closed = False
        self._closing = False
        self._tasks = BackgroundTasks(self.clock, name="pylog-log-manager",
                                      poll_s=self.config["pylog.background.poll.ms"] / 1000)
        try:
            self.startup = self._open()
        except BaseException:
            self._abort_open()
            raise
        self._producer_ids = ProducerIdAllocator([d.path for d in self._online_dirs()])
        log.info(self.startup.summary())
        self._schedule_periodic_work()
        if background:
            self._tasks.start()

    # ================================================================ opening

    def _abort_open(self) -> None:
        self._tasks.shutdown()
        for lg in self._logs.values():
            lg.abandon()
        for d in self.dirs:
            d.unlock()

    def _open(self) -> StartupReport:
        started = time.monotonic()
        node_id = self.config["node.id"]
        # 1. Lock every dir (a locked dir is an error, not an offline dir).
        for d in self.dirs:
            try:
                d.lock()
            except OSError as exc:
                self._dir_failed_at_startup(d, exc, "cannot create or lock it")
        # 2. meta.properties: one cluster id across dirs.
        cluster_ids: dict[str, str] = {}
        for d in self._online_dirs():
            try:
                meta = d.load_meta(node_id)
            except (OSError, CorruptCheckpointError) as exc:
                self._dir_failed_at_startup(d, exc, "cannot read meta.properties")
                continue
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if meta is not None:
                cluster_ids[d.path] = meta.cluster_id
        if len(set(cluster_ids.values())) > 1:
            raise ConfigError("log dirs belong to different clusters (cluster.id in "
                              "meta.properties): " + ", ".join(f"{p}: {c}" for p, c in cluster_ids.items()))
        cluster_id = next(iter(cluster_ids.values()), None) or checkpoints.random_uuid()
        for d in self._online_dirs():
            try:
                d.init_meta(cluster_id, node_id)
            except OSError as exc:
                self._dir_failed_at_startup(d, exc, "cannot write meta.properties")
        self.cluster_id = cluster_id
        if not self._online_dirs():
            raise KafkaStorageError(errno_mod.EIO, "no log dir could be opened: " + "; ".join(
                f"{d.path}: {d.offline_reason}" for d in self.dirs))
        # 3. The topic table: the newest copy wins.
        copies: dict[str, TopicTable | None] = {}
        for d in self._online_dirs():
            try:
                copies[d.path] = TopicTable.read(d.path)
            except CorruptCheckpointError as exc:
                log.warning("ignoring a corrupt topic table: %s", exc)
                copies[d.path] = None
            except OSError as exc:
                self._dir_failed_at_startup(d, exc, "cannot read the topic table")
        tables = [t for t in copies.values() if t is not None]
        adopt = not tables
        if tables:
            self._topics = max(tables, key=lambda t: t.epoch)
        # 4. Per dir: marker, checkpoints, partition dirs.
        found: dict[TopicPartition, tuple[LogDir, str]] = {}
        state: dict[str, tuple[dict, dict]] = {}
        for d in self._online_dirs():
            try:
                state[d.path] = self._prepare_dir(d)
                for tp, path in self._scan_partition_dirs(d, adopt).items():
                    if tp in found:
                        raise PylogError(f"partition {tp[0]}-{tp[1]} is in two log dirs: "
                                         f"{found[tp][1]} and {path}; remove one of them")
                    found[tp] = (d, path)
            except OSError as exc:
                self._dir_failed_at_startup(d, exc, "cannot read it")
        if adopt:
            # No topic table anywhere: a new store, or log dirs written by Kafka.
            counts: dict[str, int] = {}
            for topic, partition in found:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
            for topic, count in sorted(counts.items()):
                topic_id = None
                for p in range(count):
                    if (topic, p) in found:
                        topic_id = topic_id or checkpoints.read_partition_metadata(found[(topic, p)][1])
                self._topics.topics[topic] = Topic(topic, topic_id or checkpoints.random_uuid(), count)
                log.warning("adopted topic %r (%d partitions) found in the log dirs", topic, count)
        for name, topic in self._topics.topics.items():
            self._topic_configs[name] = self._make_config(topic.config)
        # 5. Load the logs, every dir in parallel.
        progress = _Progress(len(found))
        threads = self.config["num.recovery.threads.per.data.dir"]
        by_dir: dict[str, list[TopicPartition]] = {}
        for tp, (d, _) in found.items():
            by_dir.setdefault(d.path, []).append(tp)
        pools = {d.path: concurrent.futures.ThreadPoolExecutor(threads, f"pylog-recovery-{i}")
                 for i, d in enumerate(self.dirs) if d.path in by_dir}
        futures: dict[TopicPartition, concurrent.futures.Future] = {}
        try:
            for tp, (d, path) in sorted(found.items()):
                recovery_points, start_offsets = state[d.path]
                futures[tp] = pools[d.path].submit(
                    self._load_log, d, tp, path, recovery_points.get(tp, 0),
                    start_offsets.get(tp, 0), d.had_clean_shutdown, progress)
            reports = []
            for tp, future in futures.items():
                d = found[tp][0]
                try:
                    lg = future.result()
                except OSError as exc:
                    self._dir_failed_at_startup(d, exc, f"cannot load {tp[0]}-{tp[1]}")
                    continue
                self._logs[tp] = lg
                self._dir_of[tp] = d
                reports.append(lg.recovery)
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)
            progress.finish()
        for tp, lg in list(self._logs.items()):       # logs of dirs that failed while loading
            if not self._dir_of[tp].online:
                lg.mark_offline(self._offline_error(self._dir_of[tp]))
                lg.abandon()
        if not self._online_dirs():
            raise KafkaStorageError(errno_mod.EIO, "every log dir is offline: " + "; ".join(
                f"{d.path}: {d.offline_reason}" for d in self.dirs))
        # 6. Partitions the table has but no dir holds.
        for name, topic in sorted(self._topics.topics.items()):
            for p in range(topic.partitions):
                tp = (name, p)
                if tp in self._logs or tp in found:
                    continue
                if any(not d.online for d in self.dirs):
                    continue       # most likely on the offline dir: reported as offline
                log.warning("partition %s-%d is in no log dir; creating it empty", name, p)
                self._create_log(tp)
        # 7. Bring every copy of the topic table and the checkpoints up to date.
        if adopt or any(copies.get(d.path) is None or copies[d.path].epoch != self._topics.epoch
                        for d in self._online_dirs()):
            self._write_topic_table(self._topics)
        for d in self._online_dirs():
            self._write_checkpoints(d)
        self._load_committed_offsets()
        self._warn_about_file_limit(sum(r.segments for r in reports))
        return StartupReport(
            log_dirs=len(self.dirs), offline_dirs=tuple(d.path for d in self.dirs if not d.online),
            clean_dirs=sum(d.had_clean_shutdown for d in self.dirs),
            partitions=len(self._logs), segments=sum(r.segments for r in reports),
            segments_recovered=sum(len(r.segments_recovered) for r in reports),
            bytes_scanned=sum(r.bytes_scanned for r in reports),
            bytes_truncated=sum(r.bytes_truncated for r in reports),
            seconds=time.monotonic() - started)

    @staticmethod
    def _warn_about_file_limit(segments: int) -> None:
        """Each inactive segment holds one descriptor (its .log; the index mappings
        need none), the active one three."""
        try:
            import resource
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (ImportError, OSError, ValueError):
            return
        if soft != resource.RLIM_INFINITY and segments > 0.8 * soft:
            log.warning("%d segments hold about %d open files, close to this process's limit of %d "
                        "(ulimit -n): raise it, or use fewer, larger segments", segments,
                        segments, soft)

    def _prepare_dir(self, d: LogDir) -> tuple[dict, dict]:
        """Reads the marker and the checkpoints, then deletes the marker (so a crash
        while loading counts as unclean, KAFKA-10471)."""
        d.had_clean_shutdown = checkpoints.read_clean_shutdown(d.path)
        result = []
        for name in (files.RECOVERY_POINT_CHECKPOINT_FILE, files.LOG_START_OFFSET_CHECKPOINT_FILE):
            try:
                result.append(d.read_checkpoint(name))
            except CorruptCheckpointError as exc:
                # Kafka too resets to empty: every segment is then recovered.
                log.warning("%s; recovering every segment of %s from scratch", exc, d.path)
                result.append({})
                if name == files.RECOVERY_POINT_CHECKPOINT_FILE:
                    d.had_clean_shutdown = False
        checkpoints.delete_clean_shutdown(d.path)
        return result[0], result[1]

    def _scan_partition_dirs(self, d: LogDir, adopt: bool) -> dict[TopicPartition, str]:
        """The partition dirs of `d` that belong to known topics (all of them when
        adopting). Removes ``-delete`` dirs; sets aside dirs no topic claims."""
        found: dict[TopicPartition, str] = {}
        for entry in sorted(os.scandir(d.path), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            name = entry.name
            if name.endswith(files.DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)   # a delete that did not finish
                continue
            if name.endswith(files.STRAY_DIR_SUFFIX) or name.endswith("-future"):
                log.warning("ignoring %s (set aside earlier; delete it if unneeded)", entry.path)
                continue
            parsed = files.parse_partition_dir(name)
            if parsed is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", entry.path)
                continue
            topic, partition = parsed
            try:
                validate_topic_name(topic)
            except InvalidTopicError:
                log.warning("ignoring %s: %r is not a legal topic name", entry.path, topic)
                continue
            known = self._topics.topics.get(topic)
            stray = None
            if not adopt:
                if known is None:
                    stray = "its topic does not exist"
                elif partition >= known.partitions:
                    stray = f"the topic has only {known.partitions} partitions"
                else:
                    on_disk = checkpoints.read_partition_metadata(entry.path)
                    if on_disk is not None and on_disk != known.topic_id:
                        stray = f"it belongs to an older topic of that name (id {on_disk})"
            if stray:
                target = os.path.join(d.path, files.renamed_dir_name(
                    topic, partition, uuid.uuid4().hex, files.STRAY_DIR_SUFFIX))
                os.rename(entry.path, target)
                log.warning("set aside %s as %s: %s", entry.path, target, stray)
                continue
            found[(topic, partition)] = entry.path
        return found

    def _load_log(self, d: LogDir, tp: TopicPartition, path: str, recovery_point: int,
                  log_start_offset: int, clean: bool, progress: _Progress) -> Log:
        config = self._topic_configs[tp[0]]
        lg = Log(path, config, engine=self._engine(d, config), clock=self.clock,
                 scheduler=self._tasks, recovery_point=recovery_point,
                 log_start_offset=log_start_offset, clean_shutdown=clean,
                 on_io_error=self._io_error_handler(d, tp), topic_partition=tp)
        topic = self._topics.topics.get(tp[0])
        if topic is not None and checkpoints.read_partition_metadata(path) is None:
            checkpoints.write_partition_metadata(path, topic.topic_id)
        progress.step()
        return lg

    def _dir_failed_at_startup(self, d: LogDir, exc: OSError, what: str) -> None:
        reason = f"{what}: {exc}"
        if d.mark_offline(reason):
            log.error("log dir %s is offline: %s", d.path, reason)
        d.unlock()

    def _engine(self, d: LogDir, config: LogConfig):
        kind = config.pylog_io_engine
        try:
            return d.engine(kind, self.config["pylog.io.queue.depth"])
        except OSError as exc:
            raise ConfigError(f"pylog.io.engine = {kind!r} is unavailable here: {exc}") from None

    def _make_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig(overrides, defaults=self.defaults)

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
        if exc.errno in _PROCESS_LIMIT_ERRNOS:
            log.error("%s in log dir %s failed: %s (%s); the dir stays online: raise the limit "
                      "(ulimit -n) or use fewer, larger segments", where, d.path, exc, name)
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
            raise KafkaStorageError(exc.errno or errno_mod.EIO,
                                    f"{where} failed in log dir {d.path}: {exc}", d.path) from exc

    def _online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    @property
    def log_dirs(self) -> list[str]:
        return [d.path for d in self.dirs]

    @property
    def online_log_dirs(self) -> list[str]:
        return [d.path for d in self.dirs if d.online]

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
        tp = (topic, partition)
        lg = self._logs.get(tp)
        if lg is not None:
            d = self._dir_of.get(tp)
            if d is not None and not d.online:
                raise self._offline_error(d)
            if lg.offline:
                lg._check_open()
            return lg
        t = self._topics.topics.get(topic)
        if t is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        if not 0 <= partition < t.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{t.partitions - 1}, "
                                               f"not {partition}")
        offline = [d for d in self.dirs if not d.online]
        raise KafkaStorageError(errno_mod.EIO, f"partition {topic}-{partition} is offline: it is in "
                                f"none of the online log dirs; offline: "
                                + ", ".join(f"{d.path} ({d.offline_reason})" for d in offline))

    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, Any] | None = None, *,
                     replication_factor: int = -1) -> TopicDescription:
        """Creates a topic (Kafka's CreateTopics). `partitions` defaults to
        ``num.partitions``; `config` holds topic overrides (``retention.ms``, ...).
        Raises InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError or ConfigError."""
        return self._create_topic(name, partitions, config, replication_factor, internal=False)

    def _create_topic(self, name, partitions, config, replication_factor, internal: bool):
        validate_topic_name(name)
        if not internal and (name in INTERNAL_TOPICS):
            raise InvalidTopicError(f"topic name {name!r} is reserved for pylog's internal use")
        if replication_factor not in (-1, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: pylog is a single node; use 1 (or -1)")
        count = self.config["num.partitions"] if partitions is None else partitions
        self._check_partition_count(name, count)
        overrides = config_to_strings(LogConfig(config or {}).overrides)
        topic_config = self._make_config(overrides)
        with self._lock:
            self._check_open()
            if name in self._topics.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            for other in self._topics.topics:
                if collision_key(other) == collision_key(name):
                    raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} "
                                            f"('.' and '_' are the same in Kafka's metric names)")
            table = copy.deepcopy(self._topics)
            table.topics[name] = Topic(name, checkpoints.random_uuid(), count, overrides)
            table.epoch += 1
            self._write_topic_table(table)
            self._topics = table
            self._topic_configs[name] = topic_config
            self._create_logs([(name, p) for p in range(count)])
        return self.describe_topic(name)

    @staticmethod
    def _check_partition_count(name: str, count: Any) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidPartitionsError(f"topic {name!r}: partitions must be a positive integer, "
                                         f"not {count!r}")
        if len(files.partition_dir_name(name, count - 1)) > 255:
            raise InvalidPartitionsError(f"topic {name!r}: {count} partitions would make directory "
                                         f"names longer than 255 bytes")

    def _create_logs(self, tps: list[TopicPartition]) -> None:
        touched: set[LogDir] = set()
        for tp in tps:
            touched.add(self._create_log(tp))
        for d in touched:
            if d.online:
                self._guard(d, "fsync of the log dir", lambda d=d: files.fsync_dir(d.path))

    def _create_log(self, tp: TopicPartition) -> LogDir:
        """Creates one partition in the online dir with the fewest partitions; a dir
        that fails goes offline and the next one is tried."""
        topic = self._topics.topics[tp[0]]
        config = self._topic_configs[tp[0]]
        while True:
            d = self._next_log_dir()
            path = os.path.join(d.path, files.partition_dir_name(*tp))

            def create() -> Log:
                lg = Log(path, config, engine=self._engine(d, config), clock=self.clock,
                         scheduler=self._tasks, recovery_point=0, log_start_offset=0,
                         clean_shutdown=False, on_io_error=self._io_error_handler(d, tp),
                         topic_partition=tp)
                try:
                    checkpoints.write_partition_metadata(path, topic.topic_id)
                except BaseException:
                    lg.abandon()
                    raise
                return lg
            try:
                lg = self._guard(d, f"creating {tp[0]}-{tp[1]}", create)
            except KafkaStorageError:
                if not d.online and self._online_dirs():
                    continue        # that dir is now offline: try the next one
                raise
            self._logs[tp] = lg
            self._dir_of[tp] = d
            return d

    def _next_log_dir(self) -> LogDir:
        """Kafka's nextLogDirs: the online dir with the fewest partitions (ties: the
        first in log.dirs)."""
        online = self._online_dirs()
        if not online:
            self._check_open()
        counts = {d.path: 0 for d in online}
        for d in self._dir_of.values():
            if d.path in counts:
                counts[d.path] += 1
        return min(online, key=lambda d: counts[d.path])

    def delete_topic(self, name: str) -> None:
        """Deletes a topic: it is gone from the table at once, its partition dirs are
        renamed ``<topic>-<p>.<id>-delete`` and removed after ``file.delete.delay.ms``.
        Slices already read stay readable meanwhile."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is internal and cannot be deleted")
        with self._lock:
            self._check_open()
            topic = self._topics.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            table = copy.deepcopy(self._topics)
            del table.topics[name]
            table.epoch += 1
            self._write_topic_table(table)
            self._topics = table
            config = self._topic_configs.pop(name)
            gone = UnknownTopicOrPartitionError(f"topic {name!r} was deleted")
            for p in range(topic.partitions):
                tp = (name, p)
                lg = self._logs.pop(tp, None)
                d = self._dir_of.pop(tp, None)
                if lg is None or d is None:
                    continue
                lg.mark_offline(gone)
                with lg._lock:          # wait for an append in flight
                    pass
                if not d.online:
                    continue
                target = os.path.join(d.path, files.renamed_dir_name(
                    name, p, uuid.uuid4().hex, files.DELETE_DIR_SUFFIX))
                try:
                    os.rename(lg.path, target)
                except OSError as exc:
                    self._fail_dir(d, exc, f"deleting {name}-{p}")
                    continue
                self._tasks.schedule(config.file_delete_delay_ms / 1000,
                                     lambda target=target: shutil.rmtree(target, ignore_errors=True))
            for d in self._online_dirs():
                self._write_checkpoints(d)
        self._remove_offsets_of(name)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self._topics.topics if include_internal or n not in INTERNAL_TOPICS)

    def describe_topic(self, name: str) -> TopicDescription:
        """The topic's id, partitions (dir, online, offsets, size) and configs."""
        topic = self._topics.topics.get(name)
        config = self._topic_configs.get(name)
        if topic is None or config is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        parts = []
        for p in range(topic.partitions):
            lg = self._logs.get((name, p))
            d = self._dir_of.get((name, p))
            if lg is None or d is None or not d.online or lg.offline:
                parts.append(PartitionDescription(p, d.path if d else None, False, None, None, None, None))
                continue
            segments = lg.segments
            parts.append(PartitionDescription(p, d.path, True, lg.log_start_offset, lg.log_end_offset,
                                              sum(s.size for s in segments), len(segments)))
        return TopicDescription(name, topic.topic_id, name in INTERNAL_TOPICS, tuple(parts),
                                dict(config.items()), dict(topic.config))

    def alter_topic_config(self, name: str, config: Mapping[str, Any], *,
                           replace: bool = False) -> TopicDescription:
        """Changes a topic's overrides. By default `config` is merged into the
        current overrides (Kafka's IncrementalAlterConfigs; a value of None
        removes that override); with ``replace=True`` it replaces them all
        (Kafka's AlterConfigs). Applied to the live logs at once."""
        with self._lock:
            self._check_open()
            topic = self._topics.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            merged: dict[str, Any] = {} if replace else dict(topic.config)
            for key, value in config.items():
                key = normalize_key(key)
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            overrides = config_to_strings(LogConfig(merged).overrides)
            new_config = self._make_config(overrides)
            table = copy.deepcopy(self._topics)
            table.topics[name].config = overrides
            table.epoch += 1
            self._write_topic_table(table)
            self._topics = table
            self._topic_configs[name] = new_config
            for p in range(topic.partitions):
                lg = self._logs.get((name, p))
                if lg is not None and not lg.offline:
                    lg.update_config(new_config)
        return self.describe_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grows a topic to `total` partitions (Kafka's CreatePartitions: the new
        total, which must be larger than the current count)."""
        with self._lock:
            self._check_open()
            topic = self._topics.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            self._check_partition_count(name, total)
            if total <= topic.partitions:
                raise InvalidPartitionsError(f"topic {name!r} has {topic.partitions} partitions; the "
                                             f"new count must be larger, not {total}")
            if name == OFFSETS_TOPIC:
                raise InvalidPartitionsError(f"the partition count of {name} is fixed")
            table = copy.deepcopy(self._topics)
            table.topics[name].partitions = total
            table.epoch += 1
            self._write_topic_table(table)
            self._topics = table
            self._create_logs([(name, p) for p in range(topic.partitions, total)])
        return self.describe_topic(name)

    def _write_topic_table(self, table: TopicTable) -> None:
        written = 0
        for d in self._online_dirs():
            try:
                table.write(d.path)
                written += 1
            except OSError as exc:
                self._fail_dir(d, exc, "writing the topic table")
        if not written:
            self._check_open()
            raise KafkaStorageError(errno_mod.EIO, "the topic table could not be written to any log dir")

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
        start offset) for every log whose cleanup.policy includes delete, then the
        compaction of ``__consumer_offsets``."""
        for _, lg in self._live_logs():
            try:
                lg.maybe_roll_by_time()
                if "delete" in lg.config.cleanup_policy:
                    lg.apply_retention(now)
            except (KafkaStorageError, ValueError):
                pass     # its dir went offline (reported) or it was deleted meanwhile
        self.compact_committed_offsets()

    def compact_committed_offsets(self) -> int:
        """Keeps ``__consumer_offsets`` bounded. pylog has no general log cleaner
        yet; for this topic the live offsets are all in memory, so each partition
        that has rolled gets them rewritten as fresh records at its end (flushed),
        and its log start offset then moves to the first of them, deleting the
        older segments. A crash in between leaves old and new records, which
        replay to the same state. Returns the number of segments deleted."""
        topic = self._topics.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return 0
        deleted = 0
        with self._offsets_lock:
            for p in range(topic.partitions):
                lg = self._logs.get((OFFSETS_TOPIC, p))
                if lg is None or lg.offline or lg.closed or len(lg.segments) < 2:
                    continue
                try:
                    start = lg.log_end_offset
                    for group in self._offsets.groups():
                        if partition_for_group(group, topic.partitions) != p:
                            continue
                        live = self._offsets.group(group)
                        if live:
                            lg.append(encode_batch(
                                [encode_offset_value(v) for v in live.values()],
                                [encode_offset_key(group, t, q) for t, q in live],
                                [self.clock()] * len(live)), origin="coordinator")
                    lg.flush()
                    deleted += lg.advance_log_start_offset(start)
                except (KafkaStorageError, ValueError):
                    continue     # its dir went offline (reported) or it closed meanwhile
        return deleted

    def _checkpoint_all(self, which: str | None = None) -> None:
        for d in self._online_dirs():
            self._write_checkpoints(d, which)

    def _write_checkpoints(self, d: LogDir, which: str | None = None) -> bool:
        logs = [(tp, lg) for tp, lg in list(self._logs.items())
                if self._dir_of.get(tp) is d and not lg.offline]
        try:
            if which in (None, files.RECOVERY_POINT_CHECKPOINT_FILE):
                d.write_checkpoint(files.RECOVERY_POINT_CHECKPOINT_FILE,
                                   {tp: lg.recovery_point for tp, lg in logs})
            if which in (None, files.LOG_START_OFFSET_CHECKPOINT_FILE):
                d.write_checkpoint(files.LOG_START_OFFSET_CHECKPOINT_FILE,
                                   {tp: lg.log_start_offset for tp, lg in logs})
        except OSError as exc:
            self._fail_dir(d, exc, "writing checkpoints")
            return False
        return True

    def run_background_tasks(self) -> int:
        """Runs every background task that is due by the clock, now, on this thread
        (for tests with an injected clock and ``background=False``). Returns how
        many ran."""
        return self._tasks.run_due()

    def checkpoint(self) -> None:
        """Writes both checkpoint files of every online dir now."""
        self._checkpoint_all()

    # ====================================================== committed offsets

    def _offsets_log(self, group: str, create: bool) -> Log | None:
        topic = self._topics.topics.get(OFFSETS_TOPIC)
        if topic is None:
            if not create:
                return None
            with self._lock:
                if OFFSETS_TOPIC not in self._topics.topics:
                    self._create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], {
                        "cleanup.policy": "compact",
                        "segment.bytes": self.config["offsets.topic.segment.bytes"],
                        "compression.type": "producer"}, -1, internal=True)
                topic = self._topics.topics[OFFSETS_TOPIC]
        return self.log(OFFSETS_TOPIC, partition_for_group(group, topic.partitions))

    def init_producer_id(self) -> tuple[int, int]:
        """(producer_id, epoch) for a new idempotent producer (Kafka's InitProducerId):
        an id no producer of this store had before, epoch 0."""
        self._check_open()
        return self._producer_ids.allocate([d.path for d in self._online_dirs()]), 0

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                       metadata: str = "") -> None:
        """Stores committed offsets of `group`: ``{(topic, partition): offset}``
        (or OffsetAndMetadata values), as one record batch in
        ``__consumer_offsets``. Durable as the topic's flush policy says."""
        if not isinstance(group, str) or not group:
            raise ValueError("group id must be a non-empty string")
        now = self.clock()
        entries: dict[TopicPartition, OffsetAndMetadata] = {}
        for (topic, partition), value in offsets.items():
            t = self._topics.topics.get(topic)
            if t is None or not 0 <= partition < t.partitions:
                raise UnknownTopicOrPartitionError(f"cannot commit an offset for {topic}-{partition}: "
                                                   f"no such partition")
            if isinstance(value, OffsetAndMetadata):
                entry = OffsetAndMetadata(value.offset, value.metadata, value.leader_epoch,
                                          value.commit_timestamp if value.commit_timestamp >= 0 else now)
            else:
                entry = OffsetAndMetadata(int(value), metadata, -1, now)
            if entry.offset < 0:
                raise ValueError(f"committed offset for {topic}-{partition} must be >= 0, "
                                 f"not {entry.offset}")
            entries[(topic, partition)] = entry
        if not entries:
            return
        self._append_offsets(group, [encode_offset_key(group, t, p) for t, p in entries],
                             [encode_offset_value(v) for v in entries.values()], now)
        self._offsets.put(group, entries)

    def _append_offsets(self, group: str, keys: list[bytes], values: list[bytes | None], now: int) -> None:
        with self._offsets_lock:
            lg = self._offsets_log(group, create=True)
            lg.append(encode_batch(values, keys, [now] * len(keys)), origin="coordinator")

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset of `group` for one partition, or None."""
        found = self._offsets.get(group, topic, partition)
        return None if found is None else found.offset

    def committed_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """Every committed offset of `group`."""
        return self._offsets.group(group)

    def consumer_groups(self) -> list[str]:
        return self._offsets.groups()

    def _remove_offsets_of(self, topic: str) -> None:
        """Tombstones for the offsets of a deleted topic (Kafka's coordinator does the same)."""
        for group, tps in self._offsets.for_topic(topic).items():
            try:
                self._append_offsets(group, [encode_offset_key(group, t, p) for t, p in tps],
                                     [None] * len(tps), self.clock())
            except (KafkaStorageError, UnknownTopicOrPartitionError) as exc:
                log.warning("could not remove offsets of %s for group %s: %s", topic, group, exc)
            self._offsets.remove(group, tps)

    def _load_committed_offsets(self) -> None:
        topic = self._topics.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for p in range(topic.partitions):
            lg = self._logs.get((OFFSETS_TOPIC, p))
            if lg is None or lg.offline:
                continue
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                batches = lg.read(offset, 1 << 20).batches()
                if not batches:
                    break
                for batch in batches:
                    if not batch.is_control:
                        for record in batch.records():
                            if record.offset >= offset:
                                self._offsets.apply(record.key, record.value)
                    offset = batch.last_offset + 1

    # ============================================================== lifecycle

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Clean shutdown: stops the background thread, closes (trims and flushes)
        every log, writes the checkpoints and then the clean-shutdown marker of
        each dir that had no error, and releases the locks."""
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
        return (f"LogManager({self.log_dirs!r}, topics={len(self._topics.topics)}, "
                f"partitions={len(self._logs)}, offline_dirs={len(self.offline_log_dirs)})")


def open(log_dirs: str | os.PathLike | Iterable[str | os.PathLike], **config: Any) -> LogManager:  # noqa: A001
    """Opens (or creates) a store: ``pylog.open("/data/pylog", log_retention_hours=24)``.

    `log_dirs` is one path, a comma-separated list (Kafka's ``log.dirs``) or a
    list of paths, one per disk. Keyword arguments are broker configs, with
    Kafka's names or the same names with underscores
    (``num_recovery_threads_per_data_dir=4``, ``log_segment_bytes=...``);
    ``clock`` and ``background`` are passed to :class:`LogManager`.
    """
    options = {k: config.pop(k) for k in ("clock", "background") if k in config}
    return LogManager(log_dirs, config, **options)
