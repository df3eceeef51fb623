"""Topic administration: create, delete, list, describe, alter, add partitions.

:class:`TopicAdmin` is the keeper of the topic table that the
:class:`~pylog.storage.manager.LogManager` owns (Kafka's CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs and (Incremental)AlterConfigs; the LogManager
delegates its public methods), with partition placement (the online dir with the
fewest partitions, Kafka's ``nextLogDirs``). It sees the store only through
:class:`TopicHost`.

Every change writes a new copy of the topic table (``pylog-topics.json``,
one higher epoch) to every online dir before it takes effect in memory;
all of them hold the store's lock.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import threading
import uuid
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pylog.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from . import budget, checkpoints, files, leader_epochs
from .config import BrokerConfig, LogConfig, normalize_key
from .dir_tables import TableDirs, install_table
from .log import Log
from .log_dir import LogDir
from .topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    PartitionDescription,
    Topic,
    TopicDescription,
    TopicTable,
    collision_key,
    config_to_strings,
    validate_topic_name,
)

__all__ = ["TopicAdmin", "TopicHost"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TopicHost:
    """The store's side of topic administration (LogManager's, bound).

    ``logs``, ``dir_of`` and ``unavailable`` are the store's partition maps (its own
    dicts), changed under ``table_dirs.lock``; ``config()`` is the store's broker
    config now (dynamic configs replace it) and ``make_config(overrides)`` a topic's
    config over the current defaults; ``open_log(d, tp, path, config, ...)`` opens a
    Log as the store opens its own; ``guard(d, where, action)`` runs an action whose
    OSError takes `d` offline; ``write_checkpoints(d)``, ``schedule(delay_s, fn)``
    (the store's background thread) and ``cancel_move(tp)`` (log_dir_moves) serve a
    deletion; ``publish_epoch(epoch)`` tells the store the table's new epoch."""

    table_dirs: TableDirs
    dirs: list[LogDir]
    logs: dict[TopicPartition, Log]
    dir_of: dict[TopicPartition, LogDir]
    unavailable: dict[TopicPartition, Any]
    config: Callable[[], BrokerConfig]
    make_config: Callable[[Mapping[str, str]], LogConfig]
    open_log: Callable[..., Log]
    guard: Callable[[LogDir, str, Callable[[], Any]], Any]
    write_checkpoints: Callable[[LogDir], bool]
    schedule: Callable[[float, Callable[[], None]], None]
    cancel_move: Callable[[TopicPartition], None]
    publish_epoch: Callable[[int], None]


class TopicAdmin:
    """The topic table and each topic's config: read without a lock (a change installs
    a new table, copy-on-write), changed under the store's lock."""

    def __init__(self, host: TopicHost) -> None:
        self._host = host
        self._lock: threading.RLock = host.table_dirs.lock
        #: The same epoch as the store's ``topic_epoch``, in a one-item int64 array
        #: (only written in place): the producer holds a view of it and reads the
        #: epoch in C once per send(), without an attribute lookup.
        self.epoch_cell = array("q", [0])
        self.table = TopicTable()
        #: topic name -> its config (overrides over the store's defaults)
        self.configs: dict[str, LogConfig] = {}

    def create_topic(self, name: str, partitions: int | None = None,
                     config: Mapping[str, Any] | None = None, *,
                     replication_factor: int = -1,
                     validate_only: bool = False) -> TopicDescription | None:
        """Creates a topic (Kafka's CreateTopics). `partitions` defaults to
        ``num.partitions``; `config` holds topic overrides (``retention.ms``, ...).
        Raises InvalidTopicError, TopicAlreadyExistsError, InvalidPartitionsError,
        InvalidReplicationFactorError or ConfigError. ``validate_only`` (Kafka's
        validateOnly) runs every check, writes nothing and returns None."""
        return self._create_topic(name, partitions, config, replication_factor, internal=False,
                                  validate_only=validate_only)

    def _create_topic(self, name, partitions, config, replication_factor, internal: bool,
                      validate_only: bool = False):
        validate_topic_name(name)
        if not internal and (name in INTERNAL_TOPICS):
            raise InvalidTopicError(f"topic name {name!r} is reserved for pylog's internal use")
        if replication_factor not in (-1, 1):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor}: pylog is a single node; use 1 (or -1)")
        count = self._host.config()["num.partitions"] if partitions is None else partitions
        self._check_partition_count(name, count)
        overrides = config_to_strings(LogConfig(config or {}).overrides)
        with self._lock:
            self._host.table_dirs.check_open()
            if name in self.table.topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            for other in self.table.topics:
                if collision_key(other) == collision_key(name):
                    raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r} "
                                            f"('.' and '_' are the same in Kafka's metric names)")
            self._check_room(count)
            if validate_only:
                return None
            topic = Topic(name, checkpoints.random_uuid(), count, overrides)
            table = copy.deepcopy(self.table)
            table.topics[name] = topic
            table.epoch += 1
            # Built under the lock: a dynamic broker config may change the defaults.
            topic_config = self._host.make_config(overrides)
            self._add_partitions(table, topic, topic_config, range(count))
        return self.describe_topic(name)

    @staticmethod
    def _check_partition_count(name: str, count: Any) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidPartitionsError(f"topic {name!r}: partitions must be a positive integer, "
                                         f"not {count!r}")
        if len(files.partition_dir_name(name, count - 1)) > 255:
            raise InvalidPartitionsError(f"topic {name!r}: {count} partitions would make directory "
                                         f"names longer than 255 bytes")

    def check_partitions_per_request(self, adding: int, what: str = "Excessively large number of "
                                     "partitions per request") -> None:
        """PolicyViolationError when one request adds more than
        ``pylog.max.partitions.per.request`` partitions (Kafka's controller: 10,000)."""
        bound = self._host.config()["pylog.max.partitions.per.request"]
        if adding > bound:
            raise PolicyViolationError(f"{what}: {adding} partitions; at most {bound} "
                                       f"(pylog.max.partitions.per.request)")

    def _check_room(self, adding: int) -> None:
        """Refuses `adding` partitions beyond the per-request bound, ``pylog.max.partitions``
        or the open files and memory maps this process has left (storage/budget.py)."""
        self.check_partitions_per_request(adding)
        held = sum(t.partitions for t in self.table.topics.values())
        bound = self._host.config()["pylog.max.partitions"]
        if held + adding > bound:
            raise PolicyViolationError(f"{adding} more partitions would make {held + adding} in "
                                       f"this broker; at most {bound} (pylog.max.partitions)")
        shortfall = budget.measure(self._host.config()["pylog.open.files.reserve"]).shortfall(adding)
        if shortfall:
            raise PolicyViolationError(shortfall)

    def _add_partitions(self, table: TopicTable, topic: Topic, config: LogConfig,
                        partitions: range) -> None:
        """Creates `partitions` of `topic`, then writes `table` (which holds them) and makes
        both visible. All or nothing: if anything fails, every partition dir created here
        is removed, the old table stays, and the error is raised."""
        created: dict[TopicPartition, tuple[Log, LogDir]] = {}
        load = self.dir_load()
        try:
            todo = [(topic.name, p) for p in partitions]
            while todo:
                for tp in todo:
                    created[tp] = self.create_log(tp, topic.topic_id, config, load)
                # A dir that failed meanwhile (it is offline now): its new partitions go
                # elsewhere; with no online dir left, _create_log raises.
                todo = [tp for tp, (_, d) in created.items() if not d.online]
                for tp in todo:
                    self._discard_new_log(created.pop(tp)[0])
            for d in {d for _, d in created.values()}:
                self._host.guard(d, "fsync of the log dir", lambda d=d: files.fsync_dir(d.path))
            self.write_table(table)
        except BaseException:
            for lg, _ in created.values():
                self._discard_new_log(lg)
            raise
        for tp, (lg, d) in created.items():
            self._host.logs[tp] = lg
            self._host.dir_of[tp] = d
        self.configs[topic.name] = config
        self.install(table)

    @staticmethod
    def _discard_new_log(lg: Log) -> None:
        lg.abandon()
        shutil.rmtree(lg.path, ignore_errors=True)

    def create_log(self, tp: TopicPartition, topic_id: str, config: LogConfig,
                    load: dict[str, int]) -> tuple[Log, LogDir]:
        """Creates one partition, not yet visible, in the online dir with the fewest
        partitions (`load`: partitions per dir path, from :meth:`_dir_load`, counted up
        here); a dir that fails goes offline and the next one is tried."""
        while True:
            d = self._next_log_dir(load)
            path = os.path.join(d.path, files.partition_dir_name(*tp))

            def create() -> Log:
                if os.path.lexists(path):   # no topic claims it: a new partition starts empty
                    target = os.path.join(d.path, files.renamed_dir_name(
                        tp[0], tp[1], uuid.uuid4().hex, files.STRAY_DIR_SUFFIX))
                    os.rename(path, target)
                    log.warning("set aside %s as %s: a new partition of that name is created",
                                path, target)
                try:
                    lg = self._host.open_log(d, tp, path, config, recovery_point=0, log_start_offset=0,
                                        clean_shutdown=False)
                except BaseException:
                    shutil.rmtree(path, ignore_errors=True)   # e.g. ENOSPC: leave no empty dir
                    raise
                try:
                    checkpoints.write_partition_metadata(path, topic_id)
                    leader_epochs.attach(lg, path)
                except BaseException:
                    self._discard_new_log(lg)
                    raise
                return lg
            try:
                lg = self._host.guard(d, f"creating {tp[0]}-{tp[1]}", create)
            except KafkaStorageError:
                if not d.online and self._host.table_dirs.online_dirs():
                    continue        # that dir is now offline: try the next one
                raise
            load[d.path] += 1
            return lg, d

    def dir_load(self) -> dict[str, int]:
        """Partitions per log dir path (every dir, offline ones too)."""
        load = {d.path: 0 for d in self._host.dirs}
        for d in self._host.dir_of.values():
            load[d.path] += 1
        return load

    def _next_log_dir(self, load: dict[str, int]) -> LogDir:
        """Kafka's nextLogDirs: the online dir with the fewest partitions by `load`
        (ties: the first in log.dirs)."""
        online = self._host.table_dirs.online_dirs()
        if not online:
            self._host.table_dirs.check_open()
        return min(online, key=lambda d: load[d.path])

    def delete_topic(self, name: str) -> None:
        """Deletes a topic: it is gone from the table at once, its partition dirs are
        renamed ``<topic>-<p>.<id>-delete`` and removed after ``file.delete.delay.ms``.
        Slices already read stay readable meanwhile."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is internal and cannot be deleted")
        with self._lock:
            self._host.table_dirs.check_open()
            topic = self.table.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            table = copy.deepcopy(self.table)
            del table.topics[name]
            table.epoch += 1
            self.write_table(table)
            self.install(table)
            config = self.configs.pop(name)
            gone = UnknownTopicOrPartitionError(f"topic {name!r} was deleted")
            for p in range(topic.partitions):
                tp = (name, p)
                self._host.cancel_move(tp)
                lg = self._host.logs.pop(tp, None)
                d = self._host.dir_of.pop(tp, None)
                offline = self._host.unavailable.pop(tp, None)
                if lg is None and offline is not None:      # its dir goes too
                    d, path = offline.log_dir, offline.path
                elif lg is not None and d is not None:
                    lg.mark_offline(gone)
                    with lg._lock:          # wait for an append in flight
                        pass
                    path = lg.path
                else:
                    continue
                if d is None or path is None or not d.online:
                    continue
                target = os.path.join(d.path, files.renamed_dir_name(
                    name, p, uuid.uuid4().hex, files.DELETE_DIR_SUFFIX))
                try:
                    os.rename(path, target)
                except OSError as exc:
                    self._host.table_dirs.fail_dir(d, exc, f"deleting {name}-{p}")
                    continue
                self._host.schedule(config.file_delete_delay_ms / 1000,
                                     lambda target=target: shutil.rmtree(target, ignore_errors=True))
            for d in self._host.table_dirs.online_dirs():
                self._host.write_checkpoints(d)

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return sorted(n for n in self.table.topics if include_internal or n not in INTERNAL_TOPICS)

    def topic_config(self, name: str) -> LogConfig:
        """The topic's configuration in effect (its overrides over the store's defaults)."""
        config = self.configs.get(name)
        if config is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return config

    def describe_topic(self, name: str) -> TopicDescription:
        """The topic's id, partitions (dir, online, offsets, size) and configs."""
        topic = self.table.topics.get(name)
        config = self.configs.get(name)
        if topic is None or config is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        parts = []
        for p in range(topic.partitions):
            lg = self._host.logs.get((name, p))
            d = self._host.dir_of.get((name, p))
            if lg is None or d is None or not d.online or lg.offline:
                kept = self._host.unavailable.get((name, p))
                if d is None and kept is not None:
                    d = kept.log_dir
                parts.append(PartitionDescription(p, d.path if d else None, False, None, None, None, None))
                continue
            segments = lg.segments
            parts.append(PartitionDescription(p, d.path, True, lg.log_start_offset, lg.log_end_offset,
                                              sum(s.size for s in segments), len(segments),
                                              lg.leader_epoch))
        return TopicDescription(name, topic.topic_id, name in INTERNAL_TOPICS, tuple(parts),
                                dict(config.items()), dict(topic.config))

    def alter_topic_config(self, name: str, config: Mapping[str, Any], *, replace: bool = False,
                           validate_only: bool = False) -> TopicDescription | None:
        """Changes a topic's overrides. By default `config` is merged into the
        current overrides (Kafka's IncrementalAlterConfigs; a value of None
        removes that override); with ``replace=True`` it replaces them all
        (Kafka's AlterConfigs). Applied to the live logs at once.
        ``validate_only`` checks, writes nothing and returns None."""
        with self._lock:
            self._host.table_dirs.check_open()
            topic = self.table.topics.get(name)
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
            new_config = self._host.make_config(overrides)
            if validate_only:
                return None
            table = copy.deepcopy(self.table)
            table.topics[name].config = overrides
            table.epoch += 1
            self.write_table(table)
            self.install(table)
            self.configs[name] = new_config
            for p in range(topic.partitions):
                lg = self._host.logs.get((name, p))
                if lg is not None and not lg.offline:
                    lg.update_config(new_config)
        return self.describe_topic(name)

    def create_partitions(self, name: str, total: int, *,
                          validate_only: bool = False) -> TopicDescription | None:
        """Grows a topic to `total` partitions (Kafka's CreatePartitions: the new
        total, which must be larger than the current count). ``validate_only``
        checks, writes nothing and returns None."""
        with self._lock:
            self._host.table_dirs.check_open()
            topic = self.table.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            self._check_partition_count(name, total)
            if total <= topic.partitions:
                raise InvalidPartitionsError(f"topic {name!r} has {topic.partitions} partitions; the "
                                             f"new count must be larger, not {total}")
            if name == OFFSETS_TOPIC:
                raise InvalidPartitionsError(f"the partition count of {name} is fixed")
            self._check_room(total - topic.partitions)
            if validate_only:
                return None
            table = copy.deepcopy(self.table)
            table.topics[name].partitions = total
            table.epoch += 1
            self._add_partitions(table, table.topics[name], self.configs[name],
                                 range(topic.partitions, total))
        return self.describe_topic(name)

    def write_table(self, table: TopicTable) -> None:
        """Writes `table` to every online dir (the lock held; KafkaStorageError if none took it)."""
        install_table(self._host.table_dirs, table)

    def install(self, table: TopicTable) -> None:
        """Makes `table` the topic table (copy-on-write: never changed in place
        afterwards) and publishes its epoch."""
        self.table = table
        self.epoch_cell[0] = table.epoch
        self._host.publish_epoch(table.epoch)

    def auto_create_topic(self, name: str) -> TopicDescription:
        """The topic `name`, created with ``num.partitions`` when it does not exist and
        ``auto.create.topics.enable`` is true (Kafka's default: a producer's first
        send creates its topic); UnknownTopicOrPartitionError when it is false."""
        try:
            return self.describe_topic(name)
        except UnknownTopicOrPartitionError:
            if not self._host.config()["auto.create.topics.enable"]:
                raise UnknownTopicOrPartitionError(
                    f"topic {name!r} does not exist and auto.create.topics.enable is false") from None
        try:
            return self.create_topic(name)
        except TopicAlreadyExistsError:
            return self.describe_topic(name)   # created by another thread meanwhile

    def partition_count(self, topic: str) -> int | None:
        """The number of partitions of `topic`, or None if it does not exist."""
        t = self.table.topics.get(topic)
        return None if t is None else t.partitions

    def topic_id(self, topic: str) -> str | None:
        """The topic id of `topic` (Kafka's base64 form, as in partition.metadata), or
        None if it does not exist."""
        t = self.table.topics.get(topic)
        return None if t is None else t.topic_id

    def ensure_internal_topic(self, name: str, partitions: int, config: Mapping[str, Any]) -> int:
        """Creates the internal topic `name` (one of INTERNAL_TOPICS) unless it exists;
        returns its partition count. For the layers above storage (the group
        coordinator's ``__consumer_offsets``)."""
        if name not in INTERNAL_TOPICS:
            raise InvalidTopicError(f"{name!r} is not an internal topic")
        topic = self.table.topics.get(name)
        if topic is None:
            with self._lock:
                if name not in self.table.topics:
                    self._create_topic(name, partitions, config, -1, internal=True)
                topic = self.table.topics[name]
        return topic.partitions
