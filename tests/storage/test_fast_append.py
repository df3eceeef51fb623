"""Log.append's C fast path (storage_fastappend.pxi) against its Python path.

The same operations go to two Logs with the same fake clock, one appending
through ``_append_fast`` and one with ``pylog.storage.log.use_fast_append(False)``:
every result, every error and, at the end, every byte of every file (.log,
.index, .timeindex, producer snapshots) and the Logs' state must be equal.
A second group proves the fast path is the one taken for plain appends (so
the comparison compares two paths, not one path twice)."""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_support import T0, Clock, ManualScheduler, read_file

import pylog.storage.log as log_module
from pylog import records
from pylog.storage.log import Log

from .conftest import o_direct_available

CONFIGS = [
    {},
    {"segment.bytes": 4000, "index.interval.bytes": 300, "segment.index.bytes": 12 * 8},
    {"segment.bytes": 6000, "message.timestamp.type": "LogAppendTime"},
    {"segment.bytes": 5000, "cleanup.policy": "compact"},
    {"flush.messages": 7, "index.interval.bytes": 0},
    {"segment.ms": 50, "segment.jitter.ms": 0},
    {"compression.type": "zstd", "segment.bytes": 8000},
    {"flush.ms": 30, "max.message.bytes": 2500},
    {"message.timestamp.before.max.ms": 5000, "message.timestamp.after.max.ms": 5000},
]

# One operation: an append of one or more batches, or the clock moving.
batch = st.fixed_dictionaries({
    "values": st.lists(st.binary(max_size=300), min_size=1, max_size=25),
    "keyed": st.booleans(),
    "ts": st.sampled_from([T0, T0 - 10_000, T0 + 10_000, None]),
    "codec": st.sampled_from(["none", "none", "none", "lz4"]),
    "producer": st.sampled_from([None, None, None, 7]),
})
operation = st.one_of(
    st.tuples(st.just("append"), st.lists(batch, min_size=1, max_size=3),
              st.sampled_from(["client", "client", "producer"])),
    st.tuples(st.just("advance"), st.integers(0, 100), st.just(None)),
    st.tuples(st.just("corrupt"), batch, st.integers(0, 10_000)),
)


class Pair:
    """Two Logs fed the same operations, one per path."""

    def __init__(self, root, config, engine="portable", direct="false"):
        self.clock = Clock()
        self.logs = {}
        self.sequences = {}
        for fast in (True, False):
            path = os.path.join(root, f"{'fast' if fast else 'python'}-0")
            self.logs[fast] = Log(path, {"pylog.io.engine": engine, "pylog.io.direct": direct,
                                         **config}, clock=self.clock, scheduler=ManualScheduler())

    def encode(self, spec, base_sequence):
        n = len(spec["values"])
        keys = [b"k%d" % i for i in range(n)] if spec["keyed"] else None
        ts = None if spec["ts"] is None else [spec["ts"] + i for i in range(n)]
        pid = spec["producer"]
        return records.encode_batch(spec["values"], keys, ts if ts is not None else self.clock.now,
                                    compression=spec["codec"], producer_id=pid if pid else -1,
                                    producer_epoch=0 if pid else -1,
                                    base_sequence=base_sequence if pid else -1)

    def both(self, data, origin="client"):
        results = {}
        for fast, log in self.logs.items():
            log_module.use_fast_append(fast)
            try:
                results[fast] = ("ok", log.append(data, origin=origin))
            except Exception as exc:          # noqa: BLE001 - compared below
                results[fast] = ("error", type(exc), str(exc).replace("fast-0", "python-0"))
            finally:
                log_module.use_fast_append(True)
        assert results[True] == results[False]
        return results[True]

    def apply(self, op):
        kind, arg, extra = op
        if kind == "advance":
            self.clock.advance(arg)
            return
        if kind == "append":
            pieces = []
            for spec in arg:
                n = len(spec["values"])
                seq = self.sequences.get(spec["producer"], 0)
                pieces.append(self.encode(spec, seq))
                if spec["producer"]:
                    self.sequences[spec["producer"]] = seq + n
            result = self.both(b"".join(pieces), extra)
            if result[0] == "error":
                for spec in arg:                  # nothing was written: sequences unchanged
                    if spec["producer"]:
                        self.sequences[spec["producer"]] -= len(spec["values"])
            return
        data = bytearray(self.encode(arg, 0) if not arg["producer"] else
                         records.encode_batch(arg["values"], timestamps=self.clock.now))
        data[extra % len(data)] ^= 1 << (extra % 8)
        self.both(bytes(data))

    def check_same(self):
        fast, slow = self.logs[True], self.logs[False]
        assert fast.log_end_offset == slow.log_end_offset
        assert fast.records_appended == slow.records_appended
        assert fast.bytes_appended == slow.bytes_appended
        assert fast._unflushed_records == slow._unflushed_records
        assert [s.base_offset for s in fast.segments] == [s.base_offset for s in slow.segments]
        for a, b in zip(fast.segments, slow.segments):
            assert (a.size, a.next_offset, a.max_timestamp, a.offset_of_max_timestamp,
                    a.rolling_based_timestamp, a.bytes_since_index_entry) == \
                (b.size, b.next_offset, b.max_timestamp, b.offset_of_max_timestamp,
                 b.rolling_based_timestamp, b.bytes_since_index_entry)
            assert a.offset_index.entries == b.offset_index.entries
            assert a.time_index.entries == b.time_index.entries
        assert {pid: (e.epoch, list(e.batches)) for pid, e in fast.producer_state.producers.items()} \
            == {pid: (e.epoch, list(e.batches)) for pid, e in slow.producer_state.producers.items()}

    def close_and_compare_files(self):
        paths = {fast: log.path for fast, log in self.logs.items()}
        for log in self.logs.values():
            log.close()
        names = sorted(os.listdir(paths[True]))
        assert names == sorted(os.listdir(paths[False]))
        for name in names:
            if name.endswith(".lock"):
                continue
            assert read_file(os.path.join(paths[True], name)) == \
                read_file(os.path.join(paths[False], name)), name


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(c) or "defaults")
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, min_size=1, max_size=40))
def test_both_paths_write_the_same(tmp_path_factory, config, ops):
    pair = Pair(str(tmp_path_factory.mktemp("pair")), config)
    try:
        for op in ops:
            pair.apply(op)
            pair.check_same()
    finally:
        pair.close_and_compare_files()


@pytest.mark.parametrize("direct", ["false", "true"])
def test_both_paths_with_each_engine_and_o_direct(tmp_path, engine_kind, direct):
    if direct == "true" and not o_direct_available(str(tmp_path)):
        pytest.skip(f"{tmp_path}: the filesystem refuses O_DIRECT")
    rng = random.Random(5)
    pair = Pair(str(tmp_path), {"segment.bytes": 50_000, "index.interval.bytes": 1000},
                engine=engine_kind, direct=direct)
    for i in range(300):
        values = [rng.randbytes(rng.randrange(0, 700)) for _ in range(rng.randrange(1, 30))]
        pair.both(records.encode_batch(values, timestamps=T0 + i))
        if i % 50 == 0:
            pair.clock.advance(1)
    pair.check_same()
    assert len(pair.logs[True].segments) > 3
    pair.close_and_compare_files()


class TestFastPathTaken:
    """Plain appends never reach the Python path; the cases it must take do."""

    @pytest.fixture
    def counted(self, monkeypatch):
        calls = []
        original = Log._append_locked

        def counting(self, batches, origin, validated, *rest):
            calls.append(validated if validated is None else "validated")
            return original(self, batches, origin, validated, *rest)
        monkeypatch.setattr(Log, "_append_locked", counting)
        return calls

    def test_plain_appends_stay_in_c(self, tmp_path, counted):
        log = Log(str(tmp_path / "t-0"), {"segment.bytes": 1 << 20})
        for i in range(100):
            info = log.append(records.encode_batch([b"x" * 100] * 10, timestamps=T0 + i))
            assert info.first_offset == 10 * i
        assert counted == []
        assert log.log_end_offset == 1000
        log.close()

    def test_roll_flush_and_producer_ids_take_the_python_path(self, tmp_path, counted):
        log = Log(str(tmp_path / "t-0"), {"segment.bytes": 2000, "flush.messages": 3})
        log.append(records.encode_batch([b"x" * 100] * 2, timestamps=T0))     # C
        log.append(records.encode_batch([b"x" * 100] * 2, timestamps=T0))     # flush.messages
        log.append(records.encode_batch([b"x" * 900] * 2, timestamps=T0))     # roll
        log.append(records.encode_batch([b"y"], timestamps=T0, producer_id=3, producer_epoch=0,
                                        base_sequence=0))                     # producer state
        assert counted == ["validated", "validated", "validated"]
        log.close()

    def test_an_idempotent_producers_next_batches_stay_in_c(self, tmp_path, counted):
        """A known producer's in-sequence batches (one or several an append) are
        checked and remembered in C; a new producer, a retry, a gap and a new
        epoch take the Python path, which keeps Kafka's rules."""
        from pylog.errors import OutOfOrderSequenceError

        def batch(seq, n=2, epoch=0):
            return records.encode_batch([b"v"] * n, timestamps=T0, producer_id=9,
                                        producer_epoch=epoch, base_sequence=seq)
        log = Log(str(tmp_path / "t-0"), {"segment.bytes": 1 << 20})
        log.append(batch(0))                                  # new producer: Python
        log.append(batch(2))                                  # C
        info = log.append(batch(4) + batch(6) + batch(8, 3))  # C, three batches
        assert (info.first_offset, info.last_offset) == (4, 10)
        assert counted == ["validated"]
        entry = log.producer_state.producers[9]
        assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] \
            == [(0, 1, 0, 1), (2, 3, 2, 3), (4, 5, 4, 5), (6, 7, 6, 7), (8, 10, 8, 10)]
        retry = log.append(batch(6))                          # a duplicate: Python
        assert (retry.first_offset, retry.last_offset, retry.size) == (6, 7, 0)
        with pytest.raises(OutOfOrderSequenceError):
            log.append(batch(20))                             # a gap: Python
        log.append(batch(0, epoch=1))                         # a new epoch: Python
        assert counted == ["validated"] * 4
        assert log.log_end_offset == 13
        log.close()

    def test_closed_and_legacy_go_to_python_errors(self, tmp_path, counted):
        from pylog.errors import InvalidRecordError
        log = Log(str(tmp_path / "t-0"))
        with pytest.raises(InvalidRecordError, match="empty"):
            log.append(b"")
        log.close()
        with pytest.raises(ValueError, match="closed"):
            log.append(records.encode_batch([b"x"]))
        assert counted == [None]
