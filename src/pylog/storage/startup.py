"""Opening a store: lock the log dirs, read Kafka's root files, load every partition.

The loading half of :class:`~pylog.storage.manager.LogManager` (Kafka's
``LogManager.loadLogs``), mixed into it. Steps, in order:

1. lock every dir (a dir another process holds is an error, not an offline dir);
2. ``meta.properties``: one cluster id across the dirs;
3. the topic table: the newest copy wins; with none anywhere, topics are
   adopted from the partition dirs found (a new store, or dirs written by Kafka);
   then the dynamic broker configs, the same way (dynamic_config.py);
4. per dir: the clean-shutdown marker is read and then deleted (a crash while
   loading counts as unclean, KAFKA-10471), the checkpoints are read, and the
   partition dirs are scanned (``-delete`` dirs removed, strays set aside);
5. the logs load in parallel, ``num.recovery.threads.per.data.dir`` per dir;
6. partitions the table has but no dir holds are created empty;
7. every copy of the topic table and the checkpoints are brought up to date.

An OSError in one dir takes that dir offline and loading goes on with the
others; with no dir left, opening fails.
"""

from __future__ import annotations

import concurrent.futures
import errno as errno_mod
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from pylog.errors import (
    ConfigError,
    CorruptCheckpointError,
    InvalidTopicError,
    KafkaStorageError,
    PylogError,
)

from . import checkpoints, files
from .log import Log
from .log_dir import LogDir, process_limit_hint
from .topics import Topic, TopicTable, validate_topic_name

__all__ = ["LogLoading", "StartupReport"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


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
    segments_deleted: int = 0        # dropped after a truncation (logged at WARNING)
    bytes_deleted: int = 0
    peak_loaders: int = 0            # most logs that were loading at the same moment

    def summary(self) -> str:
        offline = f"; OFFLINE: {', '.join(self.offline_dirs)}" if self.offline_dirs else ""
        return (f"pylog: loaded {self.partitions} partitions ({self.segments} segments) from "
                f"{self.log_dirs} log dirs in {self.seconds:.2f}s; clean shutdown in "
                f"{self.clean_dirs}/{self.log_dirs} dirs; recovered {self.segments_recovered} "
                f"segments, scanned {self.bytes_scanned} bytes, truncated {self.bytes_truncated} "
                f"bytes, deleted {self.segments_deleted} segments ({self.bytes_deleted} bytes)"
                f"{offline}")


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
        self.loading = self.peak = 0     # logs being loaded now, and the most at once

    def start(self) -> None:
        with self._lock:
            self.loading += 1
            self.peak = max(self.peak, self.loading)

    def step(self) -> None:
        with self._lock:
            self.loading -= 1
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



class LogLoading:
    """LogManager's opening steps (a mixin: the state is LogManager's)."""

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
            self._install_topics(max(tables, key=lambda t: t.epoch))
        # 3b. Dynamic broker configs (KIP-226), before any topic config is built.
        self._load_dynamic_configs()
        # 4. Per dir: marker, checkpoints, partition dirs.
        found: dict[TopicPartition, tuple[LogDir, str]] = {}
        state: dict[str, tuple[dict, dict]] = {}
        for d in self._online_dirs():
            try:
                state[d.path] = self._prepare_dir(d)
                for tp, path in self._scan_partition_dirs(d, adopt).items():
                    if tp in found:
                        kept = self._resolve_duplicate(tp, found[tp][1], path)
                        if kept == path:
                            found[tp] = (d, path)
                        continue
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
                except (PylogError, ValueError) as exc:
                    # Damage confined to one partition takes only that partition out;
                    # its checkpointed offsets are kept for the next open.
                    recovery_points, start_offsets = state[d.path]
                    self._unloadable[tp] = (d, f"{type(exc).__name__}: {exc}",
                                            recovery_points.get(tp, 0), start_offsets.get(tp, 0))
                    log.error("partition %s-%d in %s cannot be loaded and is unavailable: %s",
                              tp[0], tp[1], d.path, exc)
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
        self._warn_about_file_limit(len(self._logs))
        return StartupReport(
            log_dirs=len(self.dirs), offline_dirs=tuple(d.path for d in self.dirs if not d.online),
            clean_dirs=sum(d.had_clean_shutdown for d in self.dirs),
            partitions=len(self._logs), segments=sum(r.segments for r in reports),
            segments_recovered=sum(len(r.segments_recovered) for r in reports),
            bytes_scanned=sum(r.bytes_scanned for r in reports),
            bytes_truncated=sum(r.bytes_truncated for r in reports),
            segments_deleted=sum(r.segments_deleted for r in reports),
            bytes_deleted=sum(r.bytes_deleted for r in reports), peak_loaders=progress.peak,
            seconds=time.monotonic() - started)

    @staticmethod
    def _warn_about_file_limit(partitions: int) -> None:
        """Each partition's active segment holds three descriptors; inactive segments
        hold theirs only while read (at most a quarter of the limit, see
        storage.segment.OpenSegments), so the partitions, not the segments, must fit."""
        try:
            import resource
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (ImportError, OSError, ValueError):
            return
        if soft != resource.RLIM_INFINITY and 3 * partitions > 0.6 * soft:
            log.warning("%d partitions hold about %d open files (three per active segment), "
                        "close to this process's limit of %d (ulimit -n): raise it",
                        partitions, 3 * partitions, soft)

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
            if name == files.SPARK_DIR:
                continue                       # pylog.spark's sink (not a partition)
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

    def _resolve_duplicate(self, tp: TopicPartition, first: str, second: str) -> str:
        """A partition found in two log dirs. A copy that holds no record (what a
        creation that failed half-way, e.g. on a full disk, leaves) is set aside
        and the other one kept; two copies with data are an error naming both."""
        sizes = {p: _data_bytes(p) for p in (first, second)}
        empty = [p for p, n in sizes.items() if n == 0]
        if not empty:
            raise PylogError(f"partition {tp[0]}-{tp[1]} is in two log dirs, both with data: "
                             f"{first} ({sizes[first]} bytes) and {second} ({sizes[second]} "
                             f"bytes); keep one of them and move the other away")
        drop = empty[-1]
        keep = first if drop == second else second
        parent = os.path.dirname(drop)
        target = os.path.join(parent, files.renamed_dir_name(
            tp[0], tp[1], uuid.uuid4().hex, files.STRAY_DIR_SUFFIX))
        os.rename(drop, target)
        log.warning("partition %s-%d is in two log dirs; %s holds no records and was set aside "
                    "as %s; using %s", tp[0], tp[1], drop, target, keep)
        return keep

    def _load_log(self, d: LogDir, tp: TopicPartition, path: str, recovery_point: int,
                  log_start_offset: int, clean: bool, progress: _Progress) -> Log:
        config = self._topic_configs[tp[0]]
        progress.start()
        try:
            lg = Log(path, config, engine=self._engine(d, config), clock=self.clock,
                     scheduler=self._tasks, recovery_point=recovery_point,
                     log_start_offset=log_start_offset, clean_shutdown=clean,
                     on_io_error=self._io_error_handler(d, tp), topic_partition=tp)
            topic = self._topics.topics.get(tp[0])
            if topic is not None and checkpoints.read_partition_metadata(path) is None:
                checkpoints.write_partition_metadata(path, topic.topic_id)
        finally:
            progress.step()
        return lg

    def _dir_failed_at_startup(self, d: LogDir, exc: OSError, what: str) -> None:
        hint = process_limit_hint(exc)
        if hint is not None:
            # A limit of this process, not a failed disk: no dir goes offline, the
            # open fails with what to change.
            raise KafkaStorageError(exc.errno, f"cannot open the store: {what} in {d.path}: "
                                    f"{hint}", d.path) from exc
        reason = f"{what}: {exc}"
        if d.mark_offline(reason):
            log.error("log dir %s is offline: %s", d.path, reason)
        d.unlock()


def _data_bytes(path: str) -> int:
    """Bytes of the .log files in a partition dir."""
    total = 0
    for entry in os.scandir(path):
        if entry.name.endswith(files.LOG_SUFFIX):
            total += entry.stat().st_size
    return total
