"""The in-process Consumer with isolation.level=read_committed: poll and poll_arrow return
committed and plain records below the last stable offset, skip aborted transactions
(poll_arrow in C), move past them and past markers, and go on when a marker lands."""

from __future__ import annotations

import random
import threading
import time

import pytest
from txn_support import TxnProducer

import pylog
from pylog.errors import ConfigError
from pylog.record import encode_batch


def fill(log):
    """Transactions of three producers interleaved with plain batches; returns the values
    a read_committed reader must see (all decided), in offset order, and one producer
    left with its transaction open at the end (its records after every other)."""
    rng = random.Random(7)
    producers = [TxnProducer(log, pid) for pid in (11, 12, 13)]
    pending = {p.pid: [] for p in producers}
    committed = []                       # (offset, value)
    for i in range(200):
        p = rng.choice(producers)
        roll = rng.random()
        if roll < 0.15:
            value = b"plain-%d" % i
            info = log.append(encode_batch([value]))
            committed.append((info.first_offset, value))
        elif p.open and roll < 0.35:
            if rng.random() < 0.5:
                committed += pending[p.pid]
                p.commit(bump=rng.random() < 0.5)
            else:
                p.abort(bump=rng.random() < 0.5)
            pending[p.pid] = []
        else:
            values = [b"%d-%d-%d" % (p.pid, i, j) for j in range(rng.randint(1, 4))]
            info = p.send(values)
            pending[p.pid] += list(zip(range(info.first_offset, info.last_offset + 1), values))
    for p in producers:
        if p.open:
            committed += pending[p.pid]
            p.commit()
    last = producers[0]
    last.send([b"open-0", b"open-1"])
    return [v for _, v in sorted(committed)], last


def drain(consumer, arrow: bool, max_records: int, wanted: int, timeout: float = 10.0):
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < wanted and time.monotonic() < deadline:
        if arrow:
            out += consumer.poll_arrow(0.2, max_records=max_records).column("value").to_pylist()
        else:
            out += [r.value for r in consumer.poll(0.2, max_records=max_records)]
    return out


@pytest.mark.parametrize("arrow", [False, True], ids=["poll", "poll_arrow"])
@pytest.mark.parametrize("max_records", [3, 500])
def test_read_committed_consumer_skips_aborted_and_stops_at_the_lso(store, arrow, max_records):
    store.create_topic("t", 1, {"segment.bytes": 8192})
    log = store.log("t", 0)
    expected, last = fill(log)
    assert len(log.segments) > 2
    with pylog.Consumer(store, isolation_level="read_committed", auto_offset_reset="earliest",
                        enable_auto_commit=False) as consumer:
        consumer.assign([("t", 0)])
        got = drain(consumer, arrow, max_records, len(expected))
        assert got == expected
        assert drain(consumer, arrow, max_records, 1, timeout=0.5) == []        # at the LSO
        assert consumer.position(("t", 0)) == log.last_stable_offset
        assert consumer.end_offsets([("t", 0)]) == {pylog.TopicPartition("t", 0): log.last_stable_offset}
        threading.Timer(0.3, last.commit).start()
        assert drain(consumer, arrow, max_records, 2) == [b"open-0", b"open-1"]
    with pylog.Consumer(store, auto_offset_reset="earliest", enable_auto_commit=False) as everything:
        everything.assign([("t", 0)])
        assert len(drain(everything, arrow, max_records, log.log_end_offset)) > len(expected) + 2


def test_latest_is_the_lso_for_read_committed(store):
    store.create_topic("t", 1)
    log = store.log("t", 0)
    log.append(encode_batch([b"x"]))
    p = TxnProducer(log, 5)
    p.send([b"open"])
    log.append(encode_batch([b"y"]))
    with pylog.Consumer(store, isolation_level="read_committed", auto_offset_reset="latest") as c:
        c.assign([("t", 0)])
        assert c.position(("t", 0)) == 1
        c.seek_to_end()
        assert c.position(("t", 0)) == 1
    with pylog.Consumer(store, auto_offset_reset="latest") as c:
        c.assign([("t", 0)])
        assert c.position(("t", 0)) == 3


def test_isolation_level_is_checked():
    with pytest.raises(ConfigError, match="isolation.level"):
        pylog.Consumer(None, isolation_level="read_comitted")
