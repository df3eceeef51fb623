"""``df.write.format("pylog")`` and ``writeStream.format("pylog")``.

The columns are Spark's Kafka sink's: ``value`` (binary or string, required),
``key``, ``headers`` (array<struct<key:string,value:binary>>), ``topic`` (or the
``topic`` option, which wins), ``partition``. A row without a partition goes to
Kafka's murmur2 partition of its key; rows without either go to one partition
per task (Kafka's sticky rule, made deterministic per task).

**Two phases.** A log dir has one owner (its ``.lock``), and Spark tasks run in
separate processes, so tasks do not append: each encodes its rows into Kafka
v2 batches with the C encoder and stages them (fsync'd) in a file under
``<log dir>/pylog-spark/staging/`` (``<job>/`` for a batch write,
``<queryId>/<batchId>/`` for a micro-batch); the driver's ``commit`` opens the
store and appends the staged batches in task order (offsets are assigned there,
commit.py). A failed job appends nothing; ``abort`` removes what its tasks
staged. To write while ``pylog serve`` owns the dirs, produce through the broker
instead (remote mode: at least once, as Spark's Kafka sink).

**Exactly once for streaming** (path mode): each micro-batch id of a query is
appended once, with the rows of the first run whose commit began; a rerun of the
batch (after a crash of the query or of the commit) never appends its own rows,
whatever their order: commit.py's ``QueryCommits`` has the protocol.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pylog._core.producer import partition_keys
from pylog.record import encode_batch
from pylog.storage import SPARK_DIR, LogDirsReader

from .commit import QueryCommits, StagedBatch, append_staged
from .options import OptionError, SinkOptions

__all__ = ["PylogBatchWriter", "PylogStreamWriter", "StagedBatches"]

BATCH_TARGET_BYTES = 512 << 10    # records bytes per encoded batch (max.message.bytes is 1 MiB)
_RECORD_OVERHEAD = 24             # framing of a record beside its key and value, an upper bound


@dataclass
class StagedBatches(WriterCommitMessage):
    """What one task staged: ``entries`` are (topic, partition, position, length,
    records) of encoded batches in ``path``, in the order they must be appended."""

    path: str
    task: int
    entries: list = field(default_factory=list)
    query_id: str | None = None


def _check_columns(schema, topic_option: str | None) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the pylog sink needs a 'value' column (binary or string), as Spark's "
                          f"Kafka sink does; the DataFrame has {sorted(fields)}")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise OptionError(f"column {name!r} must be binary or string, not "
                              f"{fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("column 'partition' must be an int, not "
                          f"{fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [f.name for f in h.elementType.fields] == ["key", "value"]
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>, "
                              f"not {h.simpleString()}")
    if topic_option is None and "topic" not in fields:
        raise OptionError("no topic to write to: set the option 'topic' or give the DataFrame a "
                          "'topic' column")


def _as_binary(column) -> pa.Array:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column.cast(pa.binary()) if pa.types.is_string(column.type) else column


def _chunks(values: pa.Array, keys: pa.Array | None) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of about BATCH_TARGET_BYTES of records each."""
    n = len(values)
    sizes = pc.fill_null(pc.binary_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if keys is not None:
        sizes = sizes + pc.fill_null(pc.binary_length(keys), 0).to_numpy(
            zero_copy_only=False).astype(np.int64)
    ends = np.cumsum(sizes + _RECORD_OVERHEAD)
    cuts, lo = [], 0
    while lo < n:
        base = ends[lo - 1] if lo else 0
        hi = int(np.searchsorted(ends, base + BATCH_TARGET_BYTES, side="right"))
        hi = max(hi, lo + 1)
        cuts.append((lo, min(hi, n)))
        lo = hi
    return cuts


def _task_context() -> tuple[int, int, int, str | None, str | None]:
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, os.getpid(), None, None
    return (ctx.partitionId(), ctx.attemptNumber(), ctx.taskAttemptId(),
            ctx.getLocalProperty("sql.streaming.queryId"),
            ctx.getLocalProperty("streaming.sql.batchId"))


class _StagingWriter:
    """The executor half: rows -> encoded batches, staged in a file (path mode) or
    produced to the partitions' leaders (remote mode)."""

    def __init__(self, opts: SinkOptions, schema, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("save mode overwrite is not supported: a pylog topic is "
                              "append-only; use .mode(\"append\")")
        _check_columns(schema, opts.topic)
        self.opts = opts
        self.leaders: dict | None = None
        if opts.bootstrap is not None:
            from pylog.remote import leaders
            self.partitions, self.leaders = leaders(opts.bootstrap, None, "pylog-spark",
                                                    opts.security)
            where, self.log_dir = opts.bootstrap, None
        else:
            reader = LogDirsReader(opts.paths)
            self.partitions = reader.topics()
            where, self.log_dir = ",".join(reader.paths), reader.paths[0]
        if opts.topic is not None and opts.topic not in self.partitions:
            raise OptionError(f"option 'topic': topic {opts.topic!r} does not exist in "
                              f"{where} (create it first, e.g. "
                              f"store.create_topic({opts.topic!r}, partitions=N))")
        self.job = uuid.uuid4().hex
        self.columns = {f.name.lower(): f.name for f in schema.fields}

    def _staging_dir(self) -> str:
        """The job's staging dir (a batch write)."""
        return os.path.join(self.log_dir, SPARK_DIR, "staging", self.job)

    def _task_staging_dir(self, query_id: str | None, batch_id: str | None) -> str:
        return self._staging_dir()

    def write(self, batches):
        task, attempt, task_attempt, query_id, batch_id = _task_context()
        if self.leaders is not None:
            from pylog.remote import RemoteProducer
            with RemoteProducer(self.leaders, "pylog-spark",
                                security=self.opts.security) as producer:
                for batch in batches:
                    if batch.num_rows:
                        self._stage(batch, task, producer.send)
            return StagedBatches("", task, query_id=query_id)
        return self.stage(batches, self._task_staging_dir(query_id, batch_id), task, attempt,
                          task_attempt, query_id)

    def stage(self, batches, directory: str, task: int, attempt: int = 0,
              task_attempt: int = 0, query_id: str | None = None) -> StagedBatches:
        """One task's rows, encoded and staged (fsync'd) in a file of `directory`."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{task:05d}-{attempt}-{task_attempt}.batches")
        message = StagedBatches(path, task, query_id=query_id)
        with open(path, "wb") as out:
            def stage(topic, partition, data, records):
                message.entries.append((topic, partition, out.tell(), len(data), records))
                out.write(data)
            for batch in batches:
                if batch.num_rows:
                    self._stage(batch, task, stage)
            out.flush()
            os.fsync(out.fileno())
        return message

    def _column(self, batch: pa.RecordBatch, name: str):
        real = self.columns.get(name)
        return None if real is None else batch.column(batch.schema.get_field_index(real))

    def _stage(self, batch: pa.RecordBatch, task: int, emit) -> None:
        values = _as_binary(self._column(batch, "value"))
        keys = self._column(batch, "key")
        keys = None if keys is None or keys.null_count == len(keys) else _as_binary(keys)
        headers = self._column(batch, "headers")
        partition_col = self._column(batch, "partition")
        if self.opts.topic is not None:
            groups = {self.opts.topic: None}
        else:
            topics = self._column(batch, "topic").dictionary_encode()
            if topics.null_count:
                raise ValueError("a row has a null 'topic' and no 'topic' option is set")
            codes = topics.indices.to_numpy(zero_copy_only=False)
            groups = {name: np.flatnonzero(codes == i)
                      for i, name in enumerate(topics.dictionary.to_pylist())}
        now = int(time.time() * 1000)
        for topic, rows in groups.items():
            count = self.partitions.get(topic)
            if count is None:
                raise ValueError(f"topic {topic!r} does not exist in "
                                 f"{self.opts.paths or self.opts.bootstrap}")
            sub = (lambda a: a) if rows is None else (lambda a, r=rows: a.take(pa.array(r)))
            v, k = sub(values), (None if keys is None else sub(keys))
            parts = np.full(len(v), -1, dtype=np.int32)
            if partition_col is not None:
                given = sub(partition_col)
                parts = pc.fill_null(given, -1).to_numpy(zero_copy_only=False).astype(np.int32)
                bad = (parts >= count) | (parts < -1)
                if bad.any():
                    raise ValueError(f"partition {int(parts[bad][0])} of topic {topic!r} does not "
                                     f"exist (it has {count})")
            if k is not None:
                hashed = partition_keys(k, count)
                parts = np.where(parts < 0, hashed, parts)
            parts[parts < 0] = task % count         # no partition, no key: sticky per task
            h = None if headers is None else sub(headers)
            if (parts == parts[0]).all():      # one partition (the usual case): no copy
                self._encode(topic, int(parts[0]), v, k, h, now, emit)
                continue
            order = np.argsort(parts, kind="stable")
            sorted_parts = parts[order]
            for p in np.unique(sorted_parts):
                lo, hi = np.searchsorted(sorted_parts, [p, p + 1])
                idx = pa.array(order[lo:hi])
                self._encode(topic, int(p), v.take(idx), None if k is None else k.take(idx),
                             None if h is None else h.take(idx), now, emit)

    def _encode(self, topic, partition, values, keys, headers, now, emit) -> None:
        for lo, hi in _chunks(values, keys):
            hdrs = None
            if headers is not None:      # per-record Python: headers only
                hdrs = [None if r is None else [(h["key"], h["value"]) for h in r]
                        for r in headers.slice(lo, hi - lo).to_pylist()]
            data = encode_batch(values.slice(lo, hi - lo),
                                None if keys is None else keys.slice(lo, hi - lo),
                                now, hdrs, compression=self.opts.compression)
            emit(topic, partition, data, hi - lo)


def _remove_staged(messages, directory: str | None) -> None:
    for m in messages or ():
        if m is not None and m.path:
            try:
                os.unlink(m.path)
            except FileNotFoundError:
                pass
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def _staged(m: StagedBatches) -> list[StagedBatch]:
    return [StagedBatch(t, p, m.path, position, length, records)
            for t, p, position, length, records in m.entries]


def _open_store(paths: str):
    from pylog.errors import LogDirLockedError
    from pylog.store import open as open_store
    try:
        return open_store(paths)
    except LogDirLockedError as exc:
        raise LogDirLockedError(
            f"{exc} -- the pylog sink appends at commit and needs the log dirs to itself; "
            "to write while a broker serves them, produce through the broker") from None


class PylogBatchWriter(_StagingWriter, DataSourceArrowWriter):
    def commit(self, messages) -> None:
        if self.leaders is not None:
            return                     # remote: the tasks produced (at least once)
        store = _open_store(self.opts.paths)
        try:
            present = sorted((m for m in messages if m is not None), key=lambda m: m.task)
            append_staged(store, [b for m in present for b in _staged(m)])
        finally:
            store.close()
        _remove_staged(messages, self._staging_dir())

    def abort(self, messages) -> None:
        if self.leaders is None:
            _remove_staged(messages, self._staging_dir())


class PylogStreamWriter(_StagingWriter, DataSourceStreamArrowWriter):
    """Each micro-batch exactly once into the log dirs (commit.QueryCommits). A new
    writer is built for every commit on the driver, so everything is found by the
    query's id, which the tasks carry in their messages."""

    def _commits(self, query_id: str) -> QueryCommits:
        return QueryCommits(os.path.join(self.log_dir, SPARK_DIR), query_id)

    def _task_staging_dir(self, query_id: str | None, batch_id: str | None) -> str:
        if query_id is None or batch_id is None or not batch_id.isdigit():
            return self._staging_dir()
        return self._commits(query_id).staging_dir(int(batch_id))

    def commit(self, messages, batchId: int) -> None:
        if self.leaders is not None:
            # Remote mode: the tasks produced through the broker, at least once (Spark's
            # Kafka sink's guarantee). Exactly once there needs Kafka transactions: a
            # transactional.id per query and partition-task, the tasks' transactions
            # prepared and this commit ending them (not done yet).
            return
        present = sorted((m for m in messages if m is not None), key=lambda m: m.task)
        query_id = next((m.query_id for m in present if m.query_id), None)
        if query_id is None:
            if any(m.entries for m in present):
                raise RuntimeError(
                    f"micro-batch {batchId}: the tasks staged rows but carry no streaming "
                    "query id (Spark's sql.streaming.queryId), which the sink's exactly-once "
                    "commit needs; nothing was appended")
            _remove_staged(messages, None)
            return
        self._commits(query_id).commit(lambda: _open_store(self.opts.paths), batchId,
                                       [(m.path, _staged(m)) for m in present])

    def abort(self, messages, batchId: int) -> None:
        if self.leaders is not None:
            return
        query_id = next((m.query_id for m in messages if m is not None and m.query_id), None)
        # Only this run's staged files: a begun commit's files are in the commit dir.
        _remove_staged(messages, None if query_id is None else
                       self._commits(query_id).staging_dir(batchId))
