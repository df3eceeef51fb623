"""The store's table converters: every topic with ``pylog.table.enable=true`` is converted
each ``pylog.table.commit.interval.ms``, on a thread of its own (a conversion reads and
writes for seconds: it must not hold up the store's flushes and retention). The store's
background thread looks for such topics every POLL_MS and starts that thread the first
time it finds one: a store without tables has no extra thread.

A conversion that fails (a catalog down, a refused topic) is logged once per distinct
error and tried again at the next interval; it never stops the store.

Maintenance (``pylog.table.maintenance.interval.ms``, :func:`pylog.table.maintenance.maintain`)
runs on the same thread, right after a conversion of the topic, when the wall clock has
passed a multiple of the interval (so a store restarted more often than the interval
still maintains its tables): never at the same time as a conversion of this store, and a
commit of another process in between makes it plan again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pylog.storage import LogManager

from .config import TableConfigError, table_config
from .stats import TableStats

__all__ = ["TableService", "POLL_MS"]

log = logging.getLogger(__name__)

#: How often the service looks for topics whose commit is due.
POLL_MS = 1000


class TableService:
    """``TableService(store)``; :meth:`start` runs it on a thread, :meth:`run_due` runs
    what is due now on the caller's (tests, a store opened with background=False)."""

    def __init__(self, store: LogManager, clock=None) -> None:
        self.store = store
        self._clock = clock or getattr(store, "clock", None)
        self._converters: dict[str, Any] = {}      # topic -> its TableConverter
        self._next_due: dict[str, int] = {}
        self._maintenance_due: dict[str, int] = {}
        self._errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.last_results: dict[str, Any] = {}    # topic -> its last CommitResult
        self.last_maintenance: dict[str, Any] = {}   # topic -> its table's last maintain()
        self.stats = TableStats()                 # counters for metrics (pylog.table.stats)

    def _enabled_topics(self) -> dict[str, int]:
        """Topic -> its commit interval, for the topics with tables enabled."""
        out = {}
        for name in self.store.list_topics():
            try:
                config = self.store.topic_config(name)
            except Exception:   # deleted meanwhile
                continue
            if config["pylog.table.enable"]:
                out[name] = table_config(name, config).commit_interval_ms
        return out

    def run_due(self, now_ms: int) -> int:
        """Converts every enabled topic whose interval has passed; returns how many ran."""
        ran = 0
        enabled = self._enabled_topics()
        for gone in set(self._converters) - set(enabled):
            self._converters.pop(gone, None)
            self._next_due.pop(gone, None)
            self._maintenance_due.pop(gone, None)
        for topic, interval in enabled.items():
            due = self._next_due.setdefault(topic, now_ms + interval)
            if now_ms < due or self._stop.is_set():
                continue
            self._next_due[topic] = now_ms + interval
            converter = self._converters.get(topic)
            if converter is None:
                from .converter import TableConverter    # pyarrow, once a table is enabled
                converter = self._converters[topic] = TableConverter(self.store, topic)
            try:
                while True:
                    result = converter.run_once()
                    self.last_results[topic] = result
                    self.stats.record(topic, converter.last_table, result)
                    if not result.more or self._stop.is_set():
                        break
                self._errors.pop(topic, None)
                self._maintain_if_due(topic, converter, now_ms)
            except Exception as exc:  # never stop the store; say it once per distinct error
                text = str(exc)
                if self._errors.get(topic) != text:
                    self._errors[topic] = text
                    if isinstance(exc, TableConfigError):
                        log.error("table of topic %r: %s", topic, text)
                    else:
                        log.exception("table of topic %r: conversion or maintenance failed", topic)
            ran += 1
        return ran

    def _maintain_if_due(self, topic: str, converter, now_ms: int) -> None:
        """Maintains the topic's table (and its dead-letter table) when the wall clock has
        passed the next multiple of its maintenance interval."""
        tc = converter.table_config()
        interval = tc.maintenance_interval_ms
        if interval <= 0 or converter.last_table is None or self._stop.is_set():
            self._maintenance_due.pop(topic, None)
            return
        boundary = (now_ms // interval + 1) * interval      # the next multiple after now
        due = self._maintenance_due.get(topic)
        if due is None or due > boundary:                  # first time, or a shorter interval
            self._maintenance_due[topic] = boundary
            return
        if now_ms < due:
            return
        self._maintenance_due[topic] = boundary
        from .maintenance import dead_letter_table, maintain
        table = converter.last_table
        for each in filter(None, (table, dead_letter_table(table, tc))):
            result = maintain(each, topic, tc, now_ms)
            self.stats.record_maintenance(topic, result)
            if each is table:
                self.last_maintenance[topic] = result

    def start(self) -> None:
        """Watches for enabled topics from the store's background thread."""
        self.store.add_periodic_task("table converters", POLL_MS, self._watch)

    def _watch(self, _now_ms: int) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set() and self._enabled_topics():
                self._thread = threading.Thread(target=self._run, name="pylog-tables", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.run_due(self._now())
            except Exception:
                log.exception("table service")
            if self._stop.wait(POLL_MS / 1000):
                return

    def _now(self) -> int:
        return time.time_ns() // 1_000_000 if self._clock is None else self._clock()

    def stop(self) -> None:
        """Stops the thread after the conversion in progress (its commit is atomic either
        way: a conversion cut short is redone from the table's watermark)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def errors(self) -> dict[str, Any]:
        """Topic -> the last conversion error (cleared by a successful run)."""
        return dict(self._errors)
