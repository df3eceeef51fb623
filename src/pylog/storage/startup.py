"""Opening a store: lock the log dirs, read Kafka's root files, load every partition.

The loading half of :class:`~pylog.storage.manager.LogManager` (Kafka's
``LogManager.loadLogs``): a :class:`StoreLoader` the store owns, seeing it only
through a :class:`StartupHost`. Steps, in order:

1. lock every dir (a dir another process holds is an error, not an offline dir);
2. ``meta.properties``: one cluster id across the dirs;
3. the topic table: the newest copy wins; with none anywhere, topics are
   adopted from the partition dirs found (a new store, or dirs written by Kafka);
   then the dynamic broker configs, the same way (dynamic_config.py);
4. per dir: the clean-shutdown marker is read and then deleted (a crash while
   loading counts as unclean, KAFKA-10471), the checkpoints are read, and the
   partition dirs are scanned (``-delete`` dirs removed, strays set aside), then the
   ``-future`` dirs of log-dir moves are settled (log_dir_moves.py);
5. the logs load in parallel, ``num.recovery.threads.per.data.dir`` per dir, as
   many as the process's open files and memory maps hold (storage/budget.py;
   internal topics first, then whole topics from the smallest);
6. partitions the table has but no dir holds are created empty, room permitting;
7. every copy of the topic table and the checkpoints are brought up to date.

One partition never stops the open: one beyond the budget, one whose files cannot
be opened (EMFILE, a segment that is a directory, damage, a copy with data in a
second dir, a bug) stays offline with the reason (:class:`Unavailable`) and the
rest serve. An OSError of the disk (EIO, EROFS, ...) takes its dir offline and
loading goes on with the others; a dir whose ``meta.properties`` cannot be read
goes offline too; with no dir left, opening fails.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pylog.errors import (
    ConfigError,
    CorruptCheckpointError,
    InvalidTopicError,
    KafkaStorageError,
    PylogError,
)

from . import budget, checkpoints, files, leader_epochs
from .log import Log
from .log_dir import LogDir, process_limit_hint
from .dir_tables import read_copies
from .log_dir_moves import FUTURE_DIR_SUFFIX, parse_future_dir, settle_future_dirs
from .topics import INTERNAL_TOPICS, Topic, TopicTable, validate_topic_name

if TYPE_CHECKING:
    from .config import BrokerConfig, LogConfig
    from .dir_tables import TableDirs
    from .topic_admin import TopicAdmin

__all__ = ["StartupHost", "StartupReport", "StoreLoader", "Unavailable", "dir_failed_at_startup"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: OSErrors at load that concern one partition's own files, not the disk (a segment
#: that is a directory, a dangling symlink, a file this process may not open): that
#: partition stays offline and its dir serves the others. Any other errno takes the
#: dir offline, as Kafka does for every IOException.
PARTITION_ERRNOS = frozenset({
    errno_mod.ENOENT, errno_mod.EISDIR, errno_mod.ENOTDIR, errno_mod.ELOOP, errno_mod.ENAMETOOLONG,
    errno_mod.EACCES, errno_mod.EPERM, errno_mod.EINVAL, errno_mod.EEXIST, errno_mod.ENOTEMPTY,
    errno_mod.EFBIG, errno_mod.EOVERFLOW})


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
    offline_partitions: int = 0      # kept offline: not loadable, or beyond the budget

    def summary(self) -> str:
        offline = f"; OFFLINE: {', '.join(self.offline_dirs)}" if self.offline_dirs else ""
        if self.offline_partitions:
            offline += f"; {self.offline_partitions} partitions OFFLINE (logged above)"
        return (f"pylog: loaded {self.partitions} partitions ({self.segments} segments) from "
                f"{self.log_dirs} log dirs in {self.seconds:.2f}s; clean shutdown in "
                f"{self.clean_dirs}/{self.log_dirs} dirs; recovered {self.segments_recovered} "
                f"segments, scanned {self.bytes_scanned} bytes, truncated {self.bytes_truncated} "
                f"bytes, deleted {self.segments_deleted} segments ({self.bytes_deleted} bytes)"
                f"{offline}")


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A partition of the topic table that is not open: its requests get
    KafkaStorageError (56) naming `reason`; its checkpointed offsets are kept."""

    log_dir: LogDir | None           # None: in no log dir (it could not be created)
    path: str | None
    reason: str
    recovery_point: int = 0
    log_start_offset: int = 0


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


@dataclass(frozen=True, slots=True)
class StartupHost:
    """The store's side of opening (LogManager's, bound).

    ``logs``, ``dir_of`` and ``unavailable`` are the store's partition maps (its own
    dicts, filled here); ``config()`` is the store's broker config now (the dynamic
    configs ``load_dir_tables()`` reads replace it); ``make_config(overrides)`` is a
    topic's config over the current defaults, ``open_log(d, tp, path, config, ...)``
    opens a Log as the store opens its own, ``offline_error(d)`` is the error of an
    offline dir's partitions, ``write_checkpoints(d)`` writes a dir's checkpoints and
    ``online_dirs()`` lists the dirs still online."""

    dirs: list[LogDir]
    logs: dict[TopicPartition, Log]
    dir_of: dict[TopicPartition, LogDir]
    unavailable: dict[TopicPartition, Unavailable]
    table_dirs: TableDirs
    topic_admin: TopicAdmin
    config: Callable[[], BrokerConfig]
    load_dir_tables: Callable[[], None]
    make_config: Callable[[Mapping[str, str]], LogConfig]
    open_log: Callable[..., Log]
    offline_error: Callable[[LogDir], Exception]
    write_checkpoints: Callable[[LogDir], bool]
    online_dirs: Callable[[], list[LogDir]]


class StoreLoader:
    """Opens a store (Kafka's ``LogManager.loadLogs``): :meth:`open` fills the host's
    partition maps and returns what it did. The store owns one for its opening; it
    sees the store only through `host`."""

    def __init__(self, host: StartupHost) -> None:
        self._host = host
        self.cluster_id: str | None = None      # set by open()
        self.resumable_moves: list = []          # set by open(): log-dir moves to go on with
        self._future_dirs: list = []
    def open(self) -> StartupReport:
        started = time.monotonic()
        node_id = self._host.config()["node.id"]
        # 1. Lock every dir (a locked dir is an error, not an offline dir).
        for d in self._host.dirs:
            try:
                d.lock()
            except OSError as exc:
                dir_failed_at_startup(d, exc, "cannot create or lock it")
        # 2. meta.properties: one cluster id across dirs.
        cluster_ids: dict[str, str] = {}
        for d in self._host.online_dirs():
            try:
                meta = d.load_meta(node_id)
            except (OSError, CorruptCheckpointError) as exc:
                dir_failed_at_startup(d, exc, "cannot read meta.properties")
                continue
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if meta is not None:
                cluster_ids[d.path] = meta.cluster_id
        if len(set(cluster_ids.values())) > 1:
            raise ConfigError("log dirs belong to different clusters (cluster.id in "
                              "meta.properties): " + ", ".join(f"{p}: {c}" for p, c in cluster_ids.items()))
        cluster_id = next(iter(cluster_ids.values()), None) or checkpoints.random_uuid()
        for d in self._host.online_dirs():
            try:
                d.init_meta(cluster_id, node_id)
            except OSError as exc:
                dir_failed_at_startup(d, exc, "cannot write meta.properties")
        self.cluster_id = cluster_id
        if not self._host.online_dirs():
            raise KafkaStorageError(errno_mod.EIO, "no log dir could be opened: " + "; ".join(
                f"{d.path}: {d.offline_reason}" for d in self._host.dirs))
        # 3. The topic table: the newest copy wins.
        copies = read_copies(self._host.table_dirs, TopicTable)
        tables = [t for t in copies.values() if t is not None]
        adopt = not tables
        if tables:
            self._host.topic_admin.install(max(tables, key=lambda t: t.epoch))
        # 3b. Dynamic broker configs (KIP-226), before any topic config is built; then
        #     the other tables kept in every dir (credentials, ACLs, quotas).
        self._host.load_dir_tables()
        # 4. Per dir: marker, checkpoints, partition dirs.
        self._future_dirs: list = []
        found: dict[TopicPartition, tuple[LogDir, str]] = {}
        state: dict[str, tuple[dict, dict]] = {}
        for d in self._host.online_dirs():
            try:
                state[d.path] = self._prepare_dir(d)
                for tp, path in self._scan_partition_dirs(d, adopt).items():
                    if tp in self._host.unavailable:
                        continue                 # already in two dirs with data
                    if tp in found:
                        kept = self._resolve_duplicate(tp, found[tp][1], path)
                        if kept is None:
                            first_dir, first_path = found.pop(tp)
                            self._keep_offline(tp, first_dir, first_path, state, (
                                f"it is in two log dirs, both with data: {first_path} "
                                f"({_data_bytes(first_path)} bytes) and {path} "
                                f"({_data_bytes(path)} bytes); keep one of them, move the "
                                f"other away and restart"))
                        elif kept == path:
                            found[tp] = (d, path)
                        continue
                    found[tp] = (d, path)
            except OSError as exc:
                dir_failed_at_startup(d, exc, "cannot read it")
        # 4b. Future dirs of log-dir moves: an unfinished copy goes, a copy whose source
        #     is gone (a move cut between its renames) takes its place (log_dir_moves.py).
        def claimed(tp: TopicPartition) -> bool:      # by the topic table (all, adopting)
            topic = self._host.topic_admin.table.topics.get(tp[0])
            return tp not in self._host.unavailable and (
                adopt or topic is not None and tp[1] < topic.partitions)
        try:
            # Interrupted moves: the store resumes them once it is open.
            self.resumable_moves = settle_future_dirs(self._host.dirs, self._future_dirs, found,
                                                      claimed)
        finally:
            self._future_dirs = []
        if adopt:
            # No topic table anywhere: a new store, or log dirs written by Kafka.
            counts: dict[str, int] = {}
            for topic, partition in [*found, *self._host.unavailable]:
                counts[topic] = max(counts.get(topic, 0), partition + 1)
            for topic, count in sorted(counts.items()):
                topic_id = None
                for p in range(count):
                    if (topic, p) in found:
                        topic_id = topic_id or checkpoints.read_partition_metadata(found[(topic, p)][1])
                self._host.topic_admin.table.topics[topic] = Topic(topic, topic_id or checkpoints.random_uuid(), count)
                log.warning("adopted topic %r (%d partitions) found in the log dirs", topic, count)
        for name, topic in self._host.topic_admin.table.topics.items():
            self._host.topic_admin.configs[name] = self._host.make_config(topic.config)
        # 5. Load the logs, every dir in parallel: as many as this process's open files
        #    and memory maps hold; the others stay offline, named.
        order = self._admit(self._load_order(found), "opened", lambda tp: (
            *found[tp], state))
        progress = _Progress(len(order))
        threads = self._host.config()["num.recovery.threads.per.data.dir"]
        by_dir: dict[str, list[TopicPartition]] = {}
        for tp in order:
            by_dir.setdefault(found[tp][0].path, []).append(tp)
        pools = {d.path: concurrent.futures.ThreadPoolExecutor(threads, f"pylog-recovery-{i}")
                 for i, d in enumerate(self._host.dirs) if d.path in by_dir}
        futures: dict[TopicPartition, concurrent.futures.Future] = {}
        try:
            for tp in sorted(order):
                d, path = found[tp]
                recovery_points, start_offsets = state[d.path]
                futures[tp] = pools[d.path].submit(
                    self._load_log, d, tp, path, recovery_points.get(tp, 0),
                    start_offsets.get(tp, 0), d.had_clean_shutdown, progress)
            reports = []
            for tp, future in futures.items():
                d, path = found[tp]
                try:
                    lg = future.result()
                except OSError as exc:
                    hint = process_limit_hint(exc)
                    if hint is None and exc.errno not in PARTITION_ERRNOS:
                        # The disk (EIO, EROFS, ENOSPC, ...): its dir goes offline (Kafka's rule).
                        dir_failed_at_startup(d, exc, f"cannot load {tp[0]}-{tp[1]}")
                        continue
                    self._keep_offline(tp, d, path, state, f"it could not be loaded: {exc}"
                                       + (f": {hint}" if hint else ""))
                    continue
                except Exception as exc:  # noqa: BLE001 - one partition never stops the store
                    # Damage confined to one partition (or a bug) takes only that partition
                    # out; its checkpointed offsets are kept for the next open.
                    if not isinstance(exc, PylogError | ValueError):
                        log.error("loading %s-%d failed", tp[0], tp[1], exc_info=exc)
                    self._keep_offline(tp, d, path, state,
                                       f"it could not be loaded: {type(exc).__name__}: {exc}")
                    continue
                self._host.logs[tp] = lg
                self._host.dir_of[tp] = d
                reports.append(lg.recovery)
        finally:
            for pool in pools.values():
                pool.shutdown(wait=True)
            progress.finish()
        for tp, lg in list(self._host.logs.items()):       # logs of dirs that failed while loading
            if not self._host.dir_of[tp].online:
                lg.mark_offline(self._host.offline_error(self._host.dir_of[tp]))
                lg.abandon()
        if not self._host.online_dirs():
            raise KafkaStorageError(errno_mod.EIO, "every log dir is offline: " + "; ".join(
                f"{d.path}: {d.offline_reason}" for d in self._host.dirs))
        # 6. Partitions the table has but no dir holds (a creation cut short by a crash
        #    before pylog made creations all-or-nothing): created empty, room permitting.
        missing = [] if any(not d.online for d in self._host.dirs) else [   # else: on the offline dir
            (name, p) for name, topic in self._host.topic_admin.table.topics.items() for p in range(topic.partitions)
            if (name, p) not in self._host.logs and (name, p) not in found
            and (name, p) not in self._host.unavailable]
        load = self._host.topic_admin.dir_load()
        for tp in self._admit(self._load_order(missing), "created", lambda tp: (None, None, state)):
            log.warning("partition %s-%d is in no log dir; creating it empty", *tp)
            topic = self._host.topic_admin.table.topics[tp[0]]
            try:
                self._host.logs[tp], self._host.dir_of[tp] = self._host.topic_admin.create_log(
                    tp, topic.topic_id, self._host.topic_admin.configs[tp[0]], load)
            except KafkaStorageError as exc:
                self._keep_offline(tp, None, None, state, f"it could not be created: {exc}")
        # 7. Bring every copy of the topic table and the checkpoints up to date.
        if adopt or any(copies.get(d.path) is None or copies[d.path].epoch != self._host.topic_admin.table.epoch
                        for d in self._host.online_dirs()):
            self._host.topic_admin.write_table(self._host.topic_admin.table)
        for d in self._host.online_dirs():
            self._host.write_checkpoints(d)
        return StartupReport(
            log_dirs=len(self._host.dirs), offline_dirs=tuple(d.path for d in self._host.dirs if not d.online),
            clean_dirs=sum(d.had_clean_shutdown for d in self._host.dirs),
            partitions=len(self._host.logs), segments=sum(r.segments for r in reports),
            segments_recovered=sum(len(r.segments_recovered) for r in reports),
            bytes_scanned=sum(r.bytes_scanned for r in reports),
            bytes_truncated=sum(r.bytes_truncated for r in reports),
            segments_deleted=sum(r.segments_deleted for r in reports),
            bytes_deleted=sum(r.bytes_deleted for r in reports), peak_loaders=progress.peak,
            seconds=time.monotonic() - started, offline_partitions=len(self._host.unavailable))

    def _load_order(self, tps) -> list[TopicPartition]:
        """Which partitions open first when not all fit: internal topics, then whole
        topics from the smallest (so one huge topic cannot take many small ones out),
        then by name; partitions in order."""
        def key(tp: TopicPartition):
            topic = self._host.topic_admin.table.topics.get(tp[0])
            return (tp[0] not in INTERNAL_TOPICS, topic.partitions if topic else 0, tp)
        return sorted(tps, key=key)

    def _admit(self, order: list[TopicPartition], verb: str, where) -> list[TopicPartition]:
        """The first partitions of `order` that the open-files and maps budget holds;
        the rest are kept offline with the reason (``where(tp)``: dir, path, state)."""
        now = budget.measure(self._host.config()["pylog.open.files.reserve"])
        room = now.room
        if room is None or len(order) <= room:
            return order
        why = now.shortfall(len(order))
        for tp in order[room:]:
            self._keep_offline(tp, *where(tp), f"it was not {verb} at start-up: {why}", quiet=True)
        names = ", ".join(f"{t}-{p}" for t, p in order[room:room + 5])
        log.error("%d of %d partitions were not %s and stay offline (%s%s): %s", len(order) - room,
                  len(order), verb, names, ", ..." if len(order) - room > 5 else "", why)
        return order[:room]

    def _keep_offline(self, tp: TopicPartition, d: LogDir | None, path: str | None,
                      state: dict[str, tuple[dict, dict]], reason: str, quiet: bool = False) -> None:
        """Records `tp` as offline (its requests get KafkaStorageError naming `reason`),
        keeping its checkpointed offsets for the next open; logged unless `quiet` (the
        caller logs one line for many)."""
        recovery_points, start_offsets = state.get(d.path, ({}, {})) if d else ({}, {})
        self._host.unavailable[tp] = Unavailable(d, path, reason, recovery_points.get(tp, 0),
                                            start_offsets.get(tp, 0))
        if not quiet:
            where = f" in {d.path}" if d else ""
            log.error("partition %s-%d%s is offline: %s", tp[0], tp[1], where, reason)

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
            if name in (files.SPARK_DIR, files.TABLES_DIR, files.SHARE_GROUPS_DIR):
                continue                       # pylog.spark's sink, pylog.table's tables,
                                               # share groups' state
            future = parse_future_dir(name)
            if future is not None:
                self._future_dirs.append((d, future, entry.path))
                continue
            if name.endswith((files.STRAY_DIR_SUFFIX, FUTURE_DIR_SUFFIX)):
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
            known = self._host.topic_admin.table.topics.get(topic)
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

    def _resolve_duplicate(self, tp: TopicPartition, first: str, second: str) -> str | None:
        """A partition found in two log dirs. A copy that holds no record (what a
        creation that failed half-way, e.g. on a full disk, leaves) is set aside
        and the other one kept; with data in both, None (the caller keeps the
        partition offline, naming both)."""
        sizes = {p: _data_bytes(p) for p in (first, second)}
        empty = [p for p, n in sizes.items() if n == 0]
        if not empty:
            return None
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
        config = self._host.topic_admin.configs[tp[0]]
        progress.start()
        try:
            lg = self._host.open_log(d, tp, path, config, recovery_point=recovery_point,
                                     log_start_offset=log_start_offset, clean_shutdown=clean)
            topic = self._host.topic_admin.table.topics.get(tp[0])
            if topic is not None and checkpoints.read_partition_metadata(path) is None:
                checkpoints.write_partition_metadata(path, topic.topic_id)
            leader_epochs.attach(lg, path)
        finally:
            progress.step()
        return lg


def dir_failed_at_startup(d: LogDir, exc: OSError | CorruptCheckpointError, what: str) -> None:
    """A dir that failed while the store opened goes offline, unlocked; a limit of
    the process (EMFILE, ENOMEM, ...) fails the open instead, naming what to change."""
    hint = process_limit_hint(exc) if isinstance(exc, OSError) else None
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
