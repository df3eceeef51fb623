# Stub of the compiled producer core (producer.pyx): the C half of pylog.Producer.
# tests/core/test_stubs.py checks that its names and parameters match the module's.
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa
from _typeshed import ReadableBuffer

_Column = Sequence[ReadableBuffer | None] | pa.Array | pa.ChunkedArray
_Header = tuple[str, bytes | None]

RECORD_OVERHEAD_BYTES: int
OVERLAP_BYTES: int
SMALL_CALL_BYTES: int

def murmur2(data: ReadableBuffer) -> int: ...
def key_partition(key: ReadableBuffer, num_partitions: int) -> int: ...
def partition_keys(keys: _Column, num_partitions: int) -> np.ndarray: ...
def plan_chunks(parts: np.ndarray | None, sizes: np.ndarray, null_partition: int,
                num_partitions: int, limit: int
                ) -> tuple[np.ndarray, list[tuple[int, int, int, int]], int]: ...
def plan_rows(values: list[ReadableBuffer | None], keys: list[ReadableBuffer | None] | None,
              num_partitions: int, overhead: int
              ) -> tuple[np.ndarray, np.ndarray | None, int] | None: ...
def take_rows(column: list[Any], rows: np.ndarray) -> tuple[Any, ...]: ...
def column_lengths(column: Sequence[ReadableBuffer | None]) -> np.ndarray: ...

class FastLock:
    """A futex mutex with threading.Lock's Python API; not reentrant."""
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...

class ProducerBatch:
    """Records bound for one partition, accumulated until the sender appends them."""
    topic: str
    partition: int
    values: list[Any]
    keys: list[Any]
    headers: list[Sequence[_Header] | None] | None
    size: int
    created: float
    seq: int
    sealed: bool
    base_sequence: int
    encoded: bytes | None
    count: int
    state: str
    base_offset: int
    log_append_time: int
    exception: BaseException | None
    pieces: tuple[Any, ...] | None
    watched: list[Any] | None
    def __init__(self, topic: str, partition: int, created: float = -1.0) -> None: ...
    def add(self, value: ReadableBuffer | None, key: ReadableBuffer | None, timestamp: int) -> None: ...
    @property
    def timestamps(self) -> np.ndarray: ...
    def timestamp_at(self, i: int) -> int: ...
    @property
    def record_count(self) -> int: ...
    def encode(self, compression: str | int, producer_id: int, producer_epoch: int) -> bytes: ...

class RecordFutureBase:
    """The C half of pylog.client.futures.RecordFuture: its batch and its index in it."""
    def __init__(self, batch: ProducerBatch, index: int) -> None: ...
    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...

class TopicState:
    """Partition count, open batches and the sticky partition of one topic."""
    name: str
    num_partitions: int
    open: list[ProducerBatch | None]
    sticky: int
    sequences: list[int]
    logs: list[Any]
    locks: list[Any]
    def __init__(self, name: str, num_partitions: int, batch_size: int, rng: Any) -> None: ...
    def produced(self, nbytes: int) -> None: ...

class Accumulator:
    """The per-record half of Producer.send: partition, batch, future."""
    lock: FastLock
    wakeup: Any
    space: Any
    topics: dict[str, TopicState]
    ready: Any
    lingering: Any
    buffered: int
    buffer_memory: int
    batch_size: int
    max_request: int
    seq: int
    closing: bool
    ignore_keys: bool
    idempotent: bool
    partitioner: Callable[..., int] | None
    store: Any
    metadata_epoch: int
    def __init__(self, lock: FastLock, wakeup: Any, space: Any, ready: Any, lingering: Any,
                 batch_size: int, buffer_memory: int, max_request: int, ignore_keys: bool,
                 partitioner: Callable[..., int] | None, future_cls: type, wait_for_space: Any,
                 fail: Any, store: Any, refresh_metadata: Any, topic_state: Any) -> None: ...
    def reserve_sequence(self, state: TopicState, partition: int, records: int) -> int: ...
    def seal(self, state: TopicState, batch: ProducerBatch) -> None: ...
    def send(self, topic: str, value: ReadableBuffer | None = None,
             key: ReadableBuffer | None = None, headers: Sequence[_Header] | None = None,
             partition: int | None = None, timestamp: int | None = None) -> Future[Any]: ...
    def append(self, state: TopicState, value: ReadableBuffer | None, key: ReadableBuffer | None,
               headers: Sequence[_Header] | None, partition: int | None,
               timestamp: int | None) -> Future[Any]: ...

class ProducerBase:
    """The C half of pylog.Producer."""
    def send(self, topic: str, value: ReadableBuffer | None = None,
             key: ReadableBuffer | None = None, headers: Sequence[_Header] | None = None,
             partition: int | None = None, timestamp: int | None = None,
             callback: Callable[[Any, BaseException | None], object] | None = None
             ) -> Future[Any]: ...

def batch_limit(state: TopicState, store: Any, partition: int, max_request: int) -> int: ...
