"""The store a process opens (``pylog.Store``): storage's LogManager plus the coordinators.

``pylog.open(dirs)`` and ``pylog.Store(dirs)`` return this class. It is
:class:`pylog.storage.LogManager` (log dirs, topics, partitions, background
work) with the store's one :class:`~pylog.coordinator.GroupCoordinator`
attached (``store.coordinator``) and its transaction coordinator
(``store.transactions``, :mod:`pylog.coordinator.transactions`), its table converters
(``store.tables``, :mod:`pylog.table.service`), and the coordinator's offset methods
(``commit_offsets``, ``committed``, ...) offered on the store itself.

Why a layer of its own: committed offsets live in a topic of the store, but
keeping them is the coordinator's job, and the storage layer must not
import the coordinator (docs/ARCHITECTURE.md, "What may import what"). The
facade is the one place where the two meet; the broker will build on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from pylog.common.topic_partition import TopicPartition
from pylog.coordinator import GroupCoordinator, OffsetAndMetadata
from pylog.coordinator.transactions import TransactionCoordinator
from pylog.storage import LogManager
from pylog.table.service import TableService

__all__ = ["Store", "open"]


class Store(LogManager):
    """The store: ``Store(log_dirs, config=None, *, clock=None, background=True, **configs)``.

    Everything :class:`pylog.storage.LogManager` does (see there for the
    arguments), plus the consumer groups and committed offsets of
    ``__consumer_offsets``, replayed when the store opens.
    """

    coordinator: GroupCoordinator
    transactions: TransactionCoordinator
    tables: TableService

    def __init__(self, log_dirs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(log_dirs, config, **kwargs)
        try:
            self.coordinator = GroupCoordinator(self)
            # After the groups: recovery completes prepared transactions, whose
            # markers in __consumer_offsets make pending offsets committed.
            self.transactions = TransactionCoordinator(self)
            # Topics as tables (pylog.table): converts the topics with
            # pylog.table.enable=true, on its own thread when the store has one.
            self.tables = TableService(self)
            if kwargs.get("background", True):
                self.tables.start()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stops the table converters (a conversion in progress finishes or is redone
        from its table's watermark), then closes the store (LogManager.close)."""
        tables = getattr(self, "tables", None)
        if tables is not None:
            tables.stop()
        super().close()

    def delete_topic(self, name: str) -> None:
        """Deletes a topic (see :meth:`pylog.storage.LogManager.delete_topic`); its
        committed offsets and group positions go with it, and groups rebalance."""
        super().delete_topic(name)
        self.coordinator.topic_deleted(name)

    # The coordinator's offset methods, on the store (see GroupCoordinator).

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                       metadata: str = "") -> None:
        self.coordinator.commit_offsets(group, offsets, metadata)

    commit_offsets.__doc__ = GroupCoordinator.commit_offsets.__doc__

    def committed(self, group: str, topic: str, partition: int) -> int | None:
        return self.coordinator.committed(group, topic, partition)

    committed.__doc__ = GroupCoordinator.committed.__doc__

    def committed_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.coordinator.committed_offsets(group)

    committed_offsets.__doc__ = GroupCoordinator.committed_offsets.__doc__

    def consumer_groups(self) -> list[str]:
        return self.coordinator.consumer_groups()

    consumer_groups.__doc__ = GroupCoordinator.consumer_groups.__doc__

    def metrics(self) -> dict:
        """The storage metrics (:meth:`pylog.storage.LogManager.metrics`) plus each consumer
        group's lag per partition: ``{"consumer_lag": {group: {(topic, p): lag}}}``."""
        out = super().metrics()
        lag: dict[str, dict[tuple[str, int], int]] = {}
        for group in self.coordinator.consumer_groups():
            for (topic, partition), om in self.coordinator.committed_offsets(group).items():
                end = out["partitions"].get((topic, partition), {}).get("LogEndOffset")
                if end is not None:
                    lag.setdefault(group, {})[(topic, partition)] = max(0, end - om.offset)
        out["consumer_lag"] = lag
        return out


def open(log_dirs: str | os.PathLike | Iterable[str | os.PathLike], **config: Any) -> Store:  # noqa: A001
    """Opens (or creates) a store: ``pylog.open("/data/pylog", log_retention_hours=24)``.

    `log_dirs` is one path, a comma-separated list (Kafka's ``log.dirs``) or a
    list of paths, one per disk. Keyword arguments are broker configs, with
    Kafka's names or the same names with underscores
    (``num_recovery_threads_per_data_dir=4``, ``log_segment_bytes=...``);
    ``clock`` and ``background`` are passed to :class:`Store`.
    """
    options = {k: config.pop(k) for k in ("clock", "background") if k in config}
    return Store(log_dirs, config, **options)
