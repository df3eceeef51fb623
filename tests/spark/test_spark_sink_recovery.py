"""The streaming sink's exactly once does not depend on the order of replayed rows: a
micro-batch's commit is killed (SIGKILL, in a forked child: a real process dying with
its appends in the page cache) before each of its appends and after the last, then the
batch is replayed as Spark may after a shuffle: the same rows in another order, in
other tasks, with other batch boundaries (variable-size rows). The log must hold every
row exactly once, and nothing staged may be left behind."""

from __future__ import annotations

import os
import random
import signal
import threading
import traceback

import pytest

from .support import require_pyspark

require_pyspark()

import pyarrow as pa  # noqa: E402
from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: E402

import pylog  # noqa: E402
from pylog.spark import sink  # noqa: E402
from pylog.spark.options import SinkOptions  # noqa: E402
from pylog.storage import LogDirsReader  # noqa: E402
from pylog.storage.log import Log  # noqa: E402

pytestmark = pytest.mark.spark

QUERY = "5f0c1e6a-0000-4000-8000-recovery0001"
SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    # Many staged batches from little data: 16 KiB of records per encoded batch.
    monkeypatch.setattr(sink, "BATCH_TARGET_BYTES", 16 << 10)


def value(i: int, tag: bytes = b"") -> bytes:
    size = (i * 7919) % 2500 + 1          # 1..2500 bytes: batch boundaries move with order
    return b"row-%05d%s|" % (i, tag) + b"x" * size


def make_store(path: str, config: dict | None = None) -> None:
    with pylog.open(path) as store:
        store.create_topic("s", partitions=2, config=config or {})


def writer_for(path: str):
    return sink.PylogStreamWriter(SinkOptions.parse({"path": path, "topic": "s"}), SCHEMA, False)


def stage(path: str, batch_id: int, ids: list[int], tasks: int, attempt: int,
          tag: bytes = b"") -> list:
    """Stages `ids` in `tasks` tasks as the executors of micro-batch `batch_id` would."""
    writer = writer_for(path)
    directory = os.path.join(path, "pylog-spark", "staging", QUERY, str(batch_id))
    messages = []
    for task in range(tasks):
        part = ids[task::tasks]
        rows = pa.RecordBatch.from_pydict(
            {"key": [b"k%d" % (i % 7) for i in part], "value": [value(i, tag) for i in part]},
            schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]))
        messages.append(writer.stage(iter([rows]), directory, task, attempt, 1000 * attempt + task,
                                     QUERY))
    return messages


def commit_killed(path: str, messages: list, batch_id: int, kill_after: int) -> None:
    """Commits in a forked child that SIGKILLs itself once `kill_after` appends are done
    (before the next append, or before a flush once all are done)."""
    pid = os.fork()
    if pid == 0:
        try:
            done, lock = [0], threading.Lock()
            append, flush = Log.append, Log.flush

            def die_at_the_mark():
                if done[0] == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)

            def counting_append(self, data, *args, **kwargs):
                with lock:
                    die_at_the_mark()
                    info = append(self, data, *args, **kwargs)
                    done[0] += 1
                    return info

            def checked_flush(self, *args, **kwargs):
                with lock:
                    die_at_the_mark()
                return flush(self, *args, **kwargs)

            Log.append, Log.flush = counting_append, checked_flush
            writer_for(path).commit(messages, batch_id)
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        f"the committing child was to be killed after {kill_after} appends (status {status})"


def log_values(path: str) -> list[bytes]:
    reader = LogDirsReader(path)
    out = []
    for p in range(2):
        pr = reader.partition("s", p)
        for rows in pr.read_arrow(0, pr.log_end_offset()):
            out += rows.column("value").to_pylist()
    return out


def assert_exactly_once(path: str, want: list[bytes], where: str) -> None:
    got = log_values(path)
    missing = set(want) - set(got)
    duplicates = len(got) - len(set(got))
    assert (len(got), duplicates, len(missing)) == (len(want), 0, 0), \
        f"{where}: {duplicates} duplicates, {len(missing)} rows missing"
    assert sorted(got) == sorted(want), where


def assert_nothing_left(path: str, where: str) -> None:
    spark_dir = os.path.join(path, "pylog-spark")
    staging = os.path.join(spark_dir, "staging")
    assert not os.path.exists(staging) or os.listdir(staging) == [], \
        f"{where}: left in staging: {list(os.walk(staging))}"
    assert os.listdir(os.path.join(spark_dir, "sinks")) == [f"{QUERY}.json"], where


def staged_appends(messages) -> int:
    return sum(len(m.entries) for m in messages)


def test_commit_killed_at_every_append_then_replayed_shuffled(tmp_path):
    """Micro-batch k of a query is killed after k appends (the last one after all of
    them, before they are flushed and marked done), then replayed shuffled."""
    path = str(tmp_path)
    make_store(path)
    want: list[bytes] = []
    batch_id = 0
    while True:
        ids = list(range(batch_id * 1000, batch_id * 1000 + 120))
        messages = stage(path, batch_id, ids, 3, 0)
        total = staged_appends(messages)
        assert total >= 8                  # three staged files, several batches each
        kill_after = min(batch_id, total)
        commit_killed(path, messages, batch_id, kill_after)
        shuffled = ids[:]
        random.Random(batch_id).shuffle(shuffled)
        # The replay: other tasks (2, not 3), other order, other batch boundaries.
        replay = stage(path, batch_id, shuffled, 2, 1)
        writer_for(path).commit(replay, batch_id)
        want += [value(i) for i in ids]
        assert_exactly_once(path, want, f"micro-batch {batch_id} killed after {kill_after} "
                                        f"of {total} appends, then replayed shuffled")
        if kill_after == total:
            break
        batch_id += 1
    writer_for(path).commit(stage(path, batch_id, shuffled[::-1], 2, 2), batch_id)  # skipped
    assert_exactly_once(path, want, "a replay of a done micro-batch")
    assert_nothing_left(path, "after the last commit")


def test_killed_twice_with_log_append_time_keeps_the_first_staged_rows(tmp_path):
    """A LogAppendTime topic (the log rewrites each batch's timestamps and CRC); the
    replay is killed too; the rows of the later runs differ from the first's (a
    non-deterministic query): the first staged rows are the batch."""
    path = str(tmp_path)
    make_store(path, {"message.timestamp.type": "LogAppendTime"})
    want: list[bytes] = []
    for batch_id, (first_kill, second_kill) in enumerate([(1, 0), (5, 9)]):
        ids = list(range(batch_id * 1000, batch_id * 1000 + 120))
        commit_killed(path, stage(path, batch_id, ids, 3, 0), batch_id, first_kill)
        shuffled = ids[:]
        random.Random(batch_id).shuffle(shuffled)
        commit_killed(path, stage(path, batch_id, shuffled, 2, 1, b"-run2"), batch_id,
                      second_kill)
        writer_for(path).commit(stage(path, batch_id, shuffled[::-1], 4, 2, b"-run3"), batch_id)
        want += [value(i) for i in ids]
        assert_exactly_once(path, want, f"micro-batch {batch_id} killed after {first_kill}, "
                                        f"then after {second_kill} appends")
    assert_nothing_left(path, "after the last commit")


def test_rows_another_writer_appended_between_the_kill_and_the_replay(tmp_path):
    """Records a producer appended after the killed commit are passed over, kept, and
    not taken for the batch's."""
    path = str(tmp_path)
    make_store(path)
    ids = list(range(120))
    commit_killed(path, stage(path, 0, ids, 3, 0), 0, 3)
    with pylog.open(path) as store:
        producer = pylog.Producer(store)
        for p in range(2):
            producer.send_batch("s", [b"other-%d-%d" % (p, i) for i in range(5)], partition=p)
        producer.close()
    writer_for(path).commit(stage(path, 0, ids[::-1], 2, 1), 0)
    others = [b"other-%d-%d" % (p, i) for p in range(2) for i in range(5)]
    assert_exactly_once(path, [value(i) for i in ids] + others, "a producer in between")
    assert_nothing_left(path, "after the commit")


def test_a_begun_commit_whose_staged_file_is_damaged_fails_clearly(tmp_path):
    path = str(tmp_path)
    make_store(path)
    commit_killed(path, stage(path, 0, list(range(120)), 3, 0), 0, 2)
    before = log_values(path)
    commit_dir = os.path.join(path, "pylog-spark", "sinks", f"{QUERY}.commit")
    victim = os.path.join(commit_dir, sorted(os.listdir(commit_dir))[-1])
    os.truncate(victim, os.path.getsize(victim) - 10)
    with pytest.raises(RuntimeError, match=f"micro-batch 0 of query {QUERY}: its commit began "
                                           f"but {victim} is .* bytes, not"):
        writer_for(path).commit(stage(path, 0, list(range(120)), 2, 1), 0)
    assert log_values(path) == before              # nothing appended, nothing lost
