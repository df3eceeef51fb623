"""Futures for produced records: ``concurrent.futures.Future`` without per-record cost.

``Producer.send`` returns one future per record, at up to millions per
second, and almost nobody waits on most of them. A stock Future costs a
``threading.Condition`` (two locks) at creation and a lock round trip at
completion. ``RecordFuture`` is a real ``Future`` subclass, accepted by
``concurrent.futures.wait``/``as_completed``, whose state lives in the
shared ``ProducerBatch`` (``_core/producer.pyx``): creating one stores two references, and
completing a batch completes all of its futures at once. The condition,
waiter list and callbacks are created only for futures that someone
actually waits on or registers a callback with ("watched" futures), and
only those are notified one by one.

Invariants: a future becomes watched (under ``_WATCH_LOCK``) either while
its batch is pending, and is then in the batch's ``watched`` list, or after
it finished, and then starts FINISHED. ``complete_batch`` sets the
batch state and takes the watched list in one step under that lock. A
watched future has its own ``_state``, which flips to FINISHED under its
condition together with the waiter notifications, exactly as a stock Future
does, so ``wait``/``as_completed`` never see a state change they were not
told about. The condition is made on first use (a future with only a
callback never needs it); until it exists the state flips under
``_WATCH_LOCK``, which its creation takes too.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures._base import FINISHED  # the state Future uses when done
from typing import NamedTuple

from pylog._core.producer import ProducerBatch, RecordFutureBase

__all__ = ["RecordMetadata", "ProducerBatch", "RecordFuture", "CompletedFuture", "complete_batch"]

_WATCH_LOCK = threading.Lock()


class RecordMetadata(NamedTuple):
    """Where a record landed (Kafka's RecordMetadata)."""

    topic: str
    partition: int
    offset: int
    timestamp: int              # CreateTime as sent, or the log append time
    serialized_key_size: int    # -1 for a null key
    serialized_value_size: int  # -1 for a null value


def complete_batch(batch: ProducerBatch, base_offset: int, log_append_time: int = -1,
                   exception: BaseException | None = None,
                   pieces: tuple | None = None) -> None:
    """Completes every future of a batch: successfully (base_offset) or with exception;
    or, for a batch split at append, each record by its piece: `pieces` are
    (start, end, base offset, log append time, exception), covering the records in
    order (Kafka chains a split batch's futures to the batches it was split into)."""
    with _WATCH_LOCK:
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.exception = exception
        batch.pieces = pieces
        batch.state = FINISHED
        watched, batch.watched = batch.watched, None
    for future in watched or ():
        future._notify()


class CompletedFuture(Future):
    """A Future born finished with a result: send_batch's, when its caller
    appended the whole call itself. A stock Future makes a Condition (two
    locks) when created; this one makes its condition and waiter list on first
    use, which only ``result()``, ``wait``/``as_completed`` and callbacks ask
    for. Its state never changes, so a condition made late misses no
    notification, and ``dict.setdefault`` gives two threads asking at once the
    same one. ``_core/producer.pyx`` makes it without ``__init__``: ``_result``
    is its only field."""

    _state = FINISHED
    _exception = None
    _done_callbacks = ()    # never added to: a finished future runs a callback at once

    @property
    def _condition(self) -> threading.Condition:
        cond = self.__dict__.get("_cond")
        return cond if cond is not None else self.__dict__.setdefault("_cond", threading.Condition())

    @property
    def _waiters(self) -> list:
        return self.__dict__.setdefault("_waiter_list", [])


class RecordFuture(RecordFutureBase, Future):
    """The future of one record: resolves to its RecordMetadata.

    Its fields (``_batch``, ``_index``, and ``_cond``, ``_waiter_list``,
    ``_callbacks``, ``_own_state`` once watched) live in the C base, which
    ``send()`` fills without calling ``__init__``; ``Future.__init__`` never
    runs. Cannot be cancelled (like the Java client's): the record may
    already be in the log.
    """

    __slots__ = ()

    # --- the attributes concurrent.futures reads, backed by the batch -------

    def _watch(self) -> None:
        """Called with _WATCH_LOCK held: make this future notified on completion (its
        callbacks run then). The condition and waiter list concurrent.futures needs
        are made only when asked for (:meth:`_condition`): a callback alone costs no
        lock object."""
        if self._callbacks is None:
            self._callbacks = []
            self._own_state = self._batch.state
            if self._batch.watched is not None:
                self._batch.watched.append(self)

    def _watch_with_condition(self) -> None:
        """_watch, plus the condition (with _WATCH_LOCK held). Made while the future is
        pending, before _notify ran, it is the one _notify takes; made after, its
        waiters find the state FINISHED already."""
        self._watch()
        if self._cond is None:
            self._cond = threading.Condition()
            self._waiter_list = []

    @property
    def _condition(self) -> threading.Condition:
        with _WATCH_LOCK:
            self._watch_with_condition()
        return self._cond

    @property
    def _waiters(self) -> list:
        with _WATCH_LOCK:
            self._watch_with_condition()
        return self._waiter_list

    @property
    def _state(self) -> str:
        return self._batch.state if self._callbacks is None else self._own_state

    @property
    def _exception(self) -> BaseException | None:
        batch = self._batch
        return batch.exception if batch.pieces is None else self._piece()[4]

    def _piece(self) -> tuple:
        """The piece of a split batch holding this record: (start, end, base offset,
        log append time, exception)."""
        i = self._index
        for piece in self._batch.pieces:
            if piece[0] <= i < piece[1]:
                return piece
        raise AssertionError(f"record {i} is in no piece of its split batch")

    @property
    def _result(self) -> RecordMetadata | None:
        batch = self._batch
        if batch.state != FINISHED or self._exception is not None:
            return None
        i = self._index
        if batch.pieces is None:
            offset, append_time = batch.base_offset + i, batch.log_append_time
        else:
            start, _, base, append_time, _ = self._piece()
            offset = base + i - start
        if batch.encoded is not None:
            timestamp = append_time
            key_size = value_size = -1
        else:
            timestamp = append_time if append_time >= 0 else batch.timestamp_at(i)
            key, value = batch.keys[i], batch.values[i]
            key_size = -1 if key is None else len(key)
            value_size = -1 if value is None else len(value)
        return RecordMetadata(batch.topic, batch.partition, offset, timestamp,
                              key_size, value_size)

    # --- Future API ------------------------------------------------------------

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return False

    def done(self) -> bool:
        return self._state == FINISHED

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if self._state != FINISHED:
            return super().result(timeout)
        exception = self._exception
        if exception is not None:
            raise exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != FINISHED:
            return super().exception(timeout)
        return self._exception

    def add_done_callback(self, fn) -> None:
        with _WATCH_LOCK:
            if self._batch.state != FINISHED:
                self._watch()
                self._callbacks.append(fn)
                return
        self._invoke(fn)

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def set_result(self, result) -> None:
        raise RuntimeError("a RecordFuture is completed by its producer")

    def set_exception(self, exception) -> None:
        raise RuntimeError("a RecordFuture is completed by its producer")

    # --- completion --------------------------------------------------------------

    def _notify(self) -> None:
        """Wakes waiters and runs callbacks (the batch is already FINISHED)."""
        with _WATCH_LOCK:
            cond = self._cond
            if cond is None:
                # No condition yet, so no waiter: one made from now on sees FINISHED.
                self._own_state = FINISHED
        if cond is not None:
            with cond:
                self._own_state = FINISHED
                failed = self._exception is not None
                for waiter in self._waiter_list:
                    if failed:
                        waiter.add_exception(self)
                    else:
                        waiter.add_result(self)
                cond.notify_all()
        for fn in self._callbacks:
            self._invoke(fn)

    def _invoke(self, fn) -> None:
        try:
            fn(self)
        except Exception:  # noqa: BLE001 - as Future does: a callback's error is logged, not raised
            import logging
            logging.getLogger(__name__).exception("exception calling callback for %r", self)

    def __repr__(self) -> str:
        batch = self._batch
        if batch.state != FINISHED:
            return f"<RecordFuture at {id(self):#x} state=pending>"
        exception = self._exception
        if exception is not None:
            return f"<RecordFuture at {id(self):#x} state=finished raised {type(exception).__name__}>"
        return f"<RecordFuture at {id(self):#x} state=finished offset={self._result.offset}>"

