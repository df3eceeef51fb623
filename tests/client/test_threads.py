"""Many threads on the hot paths (issue 15): results identical to one thread.

Threads hammer encode, decode_arrow, Log.append and send_batch at once, on
shared and on separate partitions; everything must come out byte-identical
to a single thread's result: no race, no torn batch, offsets dense per
partition, each producer's sequence numbers in order.
"""

import struct
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from log_support import all_records

from pylog import Producer, records
from pylog.errors import InvalidTimestampError
from pylog.storage.log import Log

THREADS = 6
# A topic whose log refuses a batch stamped 1970 (send_batch cuts its batches to fit
# the topic's size limits, so a size cannot make the log refuse one).
TOO_OLD = {"message.timestamp.before.max.ms": 3_600_000}


def run(threads, target):
    errors = []

    def body(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    pool = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert not any(t.is_alive() for t in pool), "a thread hung"
    if errors:
        raise errors[0]


def inputs():
    rng = np.random.default_rng(5)
    values = [rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
              for _ in range(700)]
    keys = [None if i % 7 == 0 else b"k%d" % i for i in range(700)]
    headers = [[("h", b"%d" % i)] if i % 3 == 0 else None for i in range(700)]
    ts = np.arange(700, dtype=np.int64) + 1_700_000_000_000
    return values, keys, headers, ts


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_encode_and_decode_from_many_threads_match_one_thread(compression):
    values, keys, headers, ts = inputs()
    arrow_values = pa.array(values, pa.binary())
    want_lists = records.encode_batch(values, keys, ts, headers, compression=compression)
    want_arrow = records.encode_batch(arrow_values, keys, ts, compression=compression)
    buffer = (want_lists + want_arrow) * 4
    want_decoded = records.decode_arrow(buffer)

    def work(i):
        for _ in range(30):
            assert records.encode_batch(values, keys, ts, headers, compression=compression) == want_lists
            assert records.encode_batch(arrow_values, keys, ts, compression=compression) == want_arrow
            assert records.decode_arrow(buffer).equals(want_decoded)
    run(THREADS, work)


def test_appends_from_many_threads_to_shared_and_own_logs(tmp_path, engine_kind):
    config = {"pylog.io.engine": engine_kind, "segment.bytes": 64 * 1024}
    shared = Log(str(tmp_path / "shared-0"), config)
    own = [Log(str(tmp_path / f"own-{i}"), config) for i in range(THREADS)]
    per_thread = 60

    def work(i):
        for j in range(per_thread):
            batch = records.encode_batch([b"%d:%d:%d" % (i, j, r) for r in range(10)])
            shared.append(batch)
            own[i].append(batch)
    run(THREADS, work)
    try:
        got = [r.value for r in all_records(shared)]
        assert shared.log_end_offset == len(got) == THREADS * per_thread * 10
        # Whole batches, never interleaved: every run of 10 is one (thread, j).
        for k in range(0, len(got), 10):
            i, j = got[k].split(b":")[:2]
            assert got[k:k + 10] == [b"%s:%s:%d" % (i, j, r) for r in range(10)]
        for i, lg in enumerate(own):
            assert [r.value for r in all_records(lg)] == \
                [b"%d:%d:%d" % (i, j, r) for j in range(per_thread) for r in range(10)]
    finally:
        for lg in [shared] + own:
            lg.close()


def batch_fields(log):
    """(base offset, count, producer id, base sequence) of every batch, from the bytes."""
    data = log.read(0, 1 << 30).read()
    out, at = [], 0
    while at < len(data):
        base, length = struct.unpack_from(">qi", data, at)
        pid, _epoch, seq, count = struct.unpack_from(">qhii", data, at + 43)
        out.append((base, count, pid, seq))
        at += 12 + length
    return out


def test_send_batch_from_many_threads_keeps_offsets_dense_and_sequences_in_order(store):
    store.create_topic("s", THREADS)
    per_thread = 40

    def work(i):
        for j in range(per_thread):
            values = [b"%d:%d:%d" % (i, j, r) for r in range(25)]
            producer.send_batch("s", values, partition=i % 3)                 # shared: 0-2
            producer.send_batch("s", values, partition=3 + i % (THREADS - 3))  # own-ish: 3-5

    with Producer(store, linger_ms=1) as producer:                            # idempotent, acks=all
        run(THREADS, work)
        producer.flush()
    total = 0
    for p in range(THREADS):
        lg = store.log("s", p)
        fields = batch_fields(lg)
        expected_offset = 0
        expected_seq = 0
        for base, count, _pid, seq in fields:
            assert base == expected_offset                                    # dense offsets
            assert seq == expected_seq, f"partition {p}: sequence {seq}, expected {expected_seq}"
            expected_offset += count
            expected_seq += count
        values = [r.value for r in lg.read_records(0, 1 << 30)]
        total += len(values)
        # Each thread's calls to one partition keep their order.
        last = {}
        for v in values:
            i, j, r = (int(x) for x in v.split(b":"))
            assert (j, r) > last.get(i, (-1, -1))
            last[i] = (j, r)
    assert total == THREADS * per_thread * 25 * 2


def test_many_threads_with_a_tiny_buffer_memory_never_deadlock(store):
    store.create_topic("b", 4)
    with Producer(store, buffer_memory=20_000, max_block_ms=30_000, linger_ms=0,
                  batch_size=2000) as producer:
        def work(i):
            for j in range(200):
                producer.send("b", b"x" * 300, key=b"%d-%d" % (i, j))
                if j % 50 == 0:
                    producer.send_batch("b", [b"y" * 100] * 20, partition=i % 4)
        run(8, work)
        producer.flush(30)
    assert sum(store.log("b", p).log_end_offset for p in range(4)) == 8 * (200 + 4 * 20)


def test_a_batch_that_fails_to_encode_fails_alone_and_gives_its_sequences_back(store):
    """An idempotent send_batch queues its batch (with its sequences) before
    encoding it outside the lock; if encoding fails, that batch fails alone and
    the partition's later batches still append in order."""
    store.create_topic("f", 1)
    with Producer(store, linger_ms=0) as producer:
        good = producer.send_batch("f", [b"a-%d" % i for i in range(50)], partition=0)
        with pytest.raises(TypeError, match="is a str"):
            producer.send_batch("f", [b"x"] * 10 + ["not bytes"], partition=0)

        def work(i):
            for j in range(20):
                producer.send_batch("f", [b"%d:%d:%d" % (i, j, r) for r in range(10)], partition=0)
        run(4, work)
        producer.flush()
        good.result(5)
    fields = batch_fields(store.log("f", 0))
    offset = seq = 0
    for base, count, _pid, s in fields:
        assert (base, s) == (offset, seq)
        offset += count
        seq += count
    assert offset == 50 + 4 * 20 * 10


def test_send_and_send_batch_mixed_on_shared_partitions_keep_each_threads_order(store):
    """send() records linger in open batches while other threads' send_batch calls take
    the direct path on quiet partitions: each thread's records of a partition still come
    out in the order it sent them, with dense offsets and in-order sequences."""
    store.create_topic("m", 3)

    def work(i):
        for j in range(30):
            p = (i + j) % 3
            producer.send("m", b"%d:%d:0" % (i, j), partition=p)
            producer.send_batch("m", [b"%d:%d:%d" % (i, j, r) for r in range(1, 9)], partition=p)

    with Producer(store, linger_ms=2) as producer:                            # idempotent, acks=all
        run(THREADS, work)
        producer.flush()
    total = 0
    for p in range(3):
        lg = store.log("m", p)
        offset = seq = 0
        for base, count, _pid, s in batch_fields(lg):
            assert (base, s) == (offset, seq), f"partition {p}"
            offset += count
            seq += count
        last = {}
        for r in lg.read_records(0, 1 << 30):
            i, j, k = (int(x) for x in r.value.split(b":"))
            assert (j, k) > last.get(i, (-1, -1)), f"partition {p}: thread {i} out of order"
            last[i] = (j, k)
            total += 1
    assert total == THREADS * 30 * 9


def test_send_batch_to_a_quiet_partition_completes_in_the_calling_thread(store):
    """The direct path: nothing of the partition is pending, so the caller appends
    the batch itself and the future is complete when send_batch returns; behind a
    lingering send() of the same partition it queues instead, and keeps the order."""
    store.create_topic("q", 2)
    with Producer(store, linger_ms=60_000, acks="all") as producer:
        fut = producer.send_batch("q", [b"a", b"b", b"c"], partition=0)
        assert fut.done() and list(fut.result().offsets) == [0, 1, 2]
        assert store.log("q", 0).recovery_point == 3                        # acks=all: fsynced
        lingering = producer.send("q", b"first", partition=1)
        queued = producer.send_batch("q", [b"second"], partition=1)
        assert not queued.done() and not lingering.done()                  # behind the open batch
        producer.flush()
        assert lingering.result(5).offset == 0 and list(queued.result(5).offsets) == [1]


def test_a_direct_append_the_log_refuses_fails_alone(store):
    """A batch the log refuses (timestamps older than message.timestamp.before.max.ms)
    on the direct path: its future fails, its sequences are given back, and the next
    batch appends."""
    store.create_topic("r", 1, config=TOO_OLD)
    with Producer(store) as producer:
        big = producer.send_batch("r", [b"x" * 500] * 10, timestamps=[1000] * 10, partition=0)
        with pytest.raises(InvalidTimestampError):
            big.result(5)
        ok = producer.send_batch("r", [b"y"] * 5, partition=0)
        assert list(ok.result(5).offsets) == [0, 1, 2, 3, 4]
    assert [seq for _b, _c, _p, seq in batch_fields(store.log("r", 0))] == [0]


def test_a_refused_direct_batch_gives_back_sequences_the_sender_already_took(store):
    """While a caller is on the direct path of a partition, a send() to it is sealed
    (with the next sequences) and taken into the sender's round, which waits for the
    partition lock. If the direct batch is then refused, that waiting batch moves down
    past the given-back sequences and appends (without the move it would fail with
    OutOfOrderSequenceError)."""
    store.create_topic("g", 1, config=TOO_OLD)
    entered, go = threading.Event(), threading.Event()
    with Producer(store, linger_ms=0) as producer:                            # idempotent
        real = producer._encode_chunks

        def slow_encode(*args, **kwargs):
            entered.set()
            assert go.wait(30)
            return real(*args, **kwargs)
        producer._encode_chunks = slow_encode
        out = {}
        direct = threading.Thread(target=lambda: out.setdefault(
            "big", producer.send_batch("g", [b"x" * 500] * 10, timestamps=[1000] * 10,
                                       partition=0)))
        direct.start()
        assert entered.wait(30)
        after = producer.send("g", b"after", partition=0)
        deadline = time.monotonic() + 30
        while not producer._round and time.monotonic() < deadline:           # taken by the sender
            time.sleep(0.001)
        assert producer._round and not after.done()
        go.set()
        direct.join(30)
        with pytest.raises(InvalidTimestampError):
            out["big"].result(5)
        assert after.result(5).offset == 0
    assert [(base, seq) for base, _c, _p, seq in batch_fields(store.log("g", 0))] == [(0, 0)]


def keys_for(partitions, count):
    """`count` distinct keys that murmur2 sends to each of `partitions` (4 in all)."""
    from pylog.client.partitioner import key_partition
    out = {p: [] for p in partitions}
    i = 0
    while any(len(v) < count for v in out.values()):
        key = b"key-%d" % i
        p = key_partition(key, 4)
        if p in out and len(out[p]) < count:
            out[p].append(key)
        i += 1
    return out


def test_a_small_keyed_call_appends_the_quiet_partitions_and_queues_the_busy_one(store):
    """One call over 4 partitions: the three quiet ones are appended by the caller in
    one pass; the one with an open batch (a lingering send) queues behind it. Every
    record lands at the offset the result reports, sequences dense per partition."""
    store.create_topic("mix", 4)
    by_part = keys_for(range(4), 5)
    keys = [k for i in range(5) for p in range(4) for k in [by_part[p][i]]]
    values = [b"v-" + k for k in keys]
    with Producer(store, linger_ms=60_000) as producer:               # idempotent, acks=all
        lingering = producer.send("mix", b"open", partition=2)
        call = producer.send_batch("mix", values, keys)
        for p in (0, 1, 3):                                           # appended by the call
            assert store.log("mix", p).log_end_offset == 5
        assert store.log("mix", 2).log_end_offset == 0 and not call.done()
        producer.flush()
        result = call.result(5)
    assert lingering.result(5).offset == 0
    assert result.partitions.tolist() == [p for _ in range(5) for p in range(4)]
    for p in range(4):
        stored = all_records(store.log("mix", p))
        mine = [r for r in stored if r.value != b"open"]
        assert [r.key for r in mine] == by_part[p]
        assert result.offsets[[i for i in range(20) if i % 4 == p]].tolist() == \
            [r.offset for r in mine]
        fields = batch_fields(store.log("mix", p))
        assert [seq for _b, _c, _pid, seq in fields] == ([0, 1] if p == 2 else [0])


def test_a_bad_record_in_a_direct_call_writes_nothing_and_gives_every_sequence_back(store):
    """A str among the values of a call over 3 partitions: send_batch raises before
    any partition is written, and the next call's batches start at sequence 0 on
    every partition (the reserved sequences went back)."""
    store.create_topic("bad", 4)
    by_part = keys_for(range(3), 2)
    keys = [by_part[p][i] for i in range(2) for p in range(3)]
    values = [b"x"] * 6
    with Producer(store) as producer:
        with pytest.raises(TypeError, match=r"values\[4\] is a str"):
            producer.send_batch("bad", values[:4] + ["text"] + values[5:], keys)
        assert all(store.log("bad", p).log_end_offset == 0 for p in range(3))
        producer.send_batch("bad", values, keys).result(5)
    for p in range(3):
        assert [(b, s) for b, _c, _pid, s in batch_fields(store.log("bad", p))] == [(0, 0)]


def test_a_refused_partition_of_a_direct_call_fails_alone(store):
    """In one call, the log refuses partition 0's batch (timestamps too old) and not
    partition 1's: partition 1 is written, the call's future reports the refusal,
    and partition 0's sequences go back for the next call."""
    store.create_topic("half", 4, config=TOO_OLD)
    by_part = keys_for([0, 1], 10)
    keys = by_part[0] + by_part[1]
    values = [b"x" * 500] * 10 + [b"y"] * 10
    timestamps = [1000] * 10 + [int(time.time() * 1000)] * 10
    with Producer(store) as producer:
        call = producer.send_batch("half", values, keys, timestamps)
        with pytest.raises(InvalidTimestampError):
            call.result(5)
        assert [r.key for r in all_records(store.log("half", 1))] == by_part[1]
        producer.send_batch("half", [b"z"] * 10, by_part[0]).result(5)
    assert [(b, s) for b, _c, _pid, s in batch_fields(store.log("half", 0))] == [(0, 0)]
    assert [(b, s) for b, _c, _pid, s in batch_fields(store.log("half", 1))] == [(0, 0)]


def test_a_keyed_call_with_one_busy_partition_reserves_nothing_on_the_small_path(store):
    """A small keyed call whose partitions are quiet but for one (a lingering send()
    holds it) leaves the one-C-call path before reserving anything and takes the
    general one: the quiet partitions are appended at once, the busy one queues
    behind the send(), and every partition's sequences stay dense from 0."""
    store.create_topic("b", 4)
    keys = keys_for([0, 1, 2, 3], 3)
    with Producer(store, linger_ms=60_000) as producer:                       # idempotent
        first = producer.send("b", b"first", partition=2)
        rows = [(keys[p][i], b"v%d-%d" % (p, i)) for i in range(3) for p in range(4)]
        fut = producer.send_batch("b", [v for _, v in rows], [k for k, _ in rows])
        assert not fut.done()                                  # partition 2 queues
        producer.flush()
        result = fut.result(5)
        assert first.result(5).offset == 0
        assert sorted(result.ranges) == [0, 1, 2, 3]
        again = producer.send_batch("b", [b"x"] * 4, [keys[p][0] for p in range(4)])
        assert again.done()                                    # all quiet: the C path
    for p in range(4):
        fields = batch_fields(store.log("b", p))
        counts = [c for _b, c, _p, _s in fields]
        sequences = [s for _b, _c, _p, s in fields]
        assert sequences == [sum(counts[:i]) for i in range(len(counts))], (p, fields)
        want = ([b"first"] if p == 2 else []) + [b"v%d-%d" % (p, i) for i in range(3)] + [b"x"]
        assert [r.value for r in all_records(store.log("b", p))] == want


def test_send_batchs_completed_future_is_a_full_future(store):
    """send_batch's future when the caller appended the whole call is born finished
    (no Condition made): result, exception, callbacks, wait and as_completed work
    as on any Future, also from several threads at once."""
    import concurrent.futures as cf

    store.create_topic("f", 2)
    with Producer(store) as producer:
        futs = [producer.send_batch("f", [b"a", b"b"], partition=i % 2) for i in range(6)]
        assert all(type(f).__name__ == "CompletedFuture" for f in futs)
        done, pending = cf.wait(futs, timeout=5)
        assert len(done) == 6 and not pending
        assert sorted(f.result(0).count for f in cf.as_completed(futs, timeout=5)) == [2] * 6
        seen = []
        futs[0].add_done_callback(seen.append)
        assert seen == [futs[0]] and futs[0].exception(0) is None and futs[0].done()
        assert not futs[0].cancel() and not futs[0].cancelled() and not futs[0].running()
        with pytest.raises(cf.InvalidStateError):
            futs[0].set_result(None)
        conditions = []
        run(THREADS, lambda _i: conditions.append(futs[1]._condition))
        assert all(c is conditions[0] for c in conditions)
        assert [list(f.result().offsets) for f in futs] == [[0, 1], [0, 1], [2, 3], [2, 3],
                                                           [4, 5], [4, 5]]
