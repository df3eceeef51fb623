"""Log compaction with transactions, by Kafka's rules (LogCleaner.scala): nothing past the
last stable offset is cleaned; an aborted transaction's records go at once and never shadow
a committed value of their key; markers stay while their transaction has records, then
until delete.retention.ms after their segment was cleaned; each producer's last batch, or
its last marker when a bumped epoch makes that its last record, is kept as an empty header;
an aborted transaction's .txnindex entry follows its marker into the cleaned segment."""

from __future__ import annotations

import os
import struct

from txn_support import TxnProducer

from pylog.record import iter_batches

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 1500, "delete.retention.ms": 60_000,
           "min.cleanable.dirty.ratio": "0.01"}


def batches(lg):
    out = []
    for segment in lg.segments:
        out += list(iter_batches(segment.log.read(0, segment.size)))
    return out


def data(lg):
    """(key, value) of every record left, in offset order."""
    return [(r.key, r.value) for b in batches(lg) if not b.is_control for r in b.records()]


def markers(lg):
    return [(b.producer_id, b.records_count and b.control_type, b.records_count)
            for b in batches(lg) if b.is_control]


def txnindex(lg):
    out = []
    for name in sorted(os.listdir(lg.path)):
        if name.endswith(".txnindex"):
            with open(os.path.join(lg.path, name), "rb") as f:
                raw = f.read()
            out += [struct.unpack_from(">hqqqq", raw, i)[1:3] for i in range(0, len(raw), 34)]
    return out


def plain(lg, clock, key: bytes, value: bytes, n: int = 1):
    for _ in range(n):
        lg.append_records([value], [key], timestamps=[clock.now])


def test_aborted_records_go_markers_follow_kafkas_rules(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("c", 1, config=COMPACT)
    lg = store.log("c", 0)
    ts = {"timestamp": clock.now}
    a, b, d = TxnProducer(lg, 1), TxnProducer(lg, 2), TxnProducer(lg, 4)
    a.send([b"a1", b"a2"], [b"k1", b"k2"], **ts)
    b.send([b"aborted"] * 2, [b"k1", b"k3"], **ts)   # later than a's k1, but aborted
    a.commit()
    b.abort()
    d.send([b"d-aborted"], [b"k9"], **ts)
    d.abort(bump=True)                             # d's last record: the marker, epoch 1
    plain(lg, clock, b"filler", b"x" * 100, 12)
    c = TxnProducer(lg, 3)
    c.send([b"open"], [b"k1"], **ts)               # open: the LSO stops here
    open_at = lg.last_stable_offset
    plain(lg, clock, b"k2", b"after-lso", 12)      # k2 rewritten past the LSO
    lg.roll()
    assert len(lg.segments) > 3
    stats = store.clean_once()
    assert stats is not None and stats.end_offset <= open_at
    left = data(lg)
    assert (b"k1", b"a1") in left and (b"k2", b"a2") in left       # a's committed values
    assert b"aborted" not in [v for _, v in left] and b"d-aborted" not in [v for _, v in left]
    assert (b"k1", b"open") in left and left.count((b"k2", b"after-lso")) == 12  # past the LSO
    # Aborted transactions had records read in this pass: their markers and entries stay.
    assert markers(lg) == [(1, "commit", 1), (2, "abort", 1), (4, "abort", 1)]
    assert txnindex(lg) == [(2, 2), (4, 6)]
    # a and b go on with a transaction each (their first ones' batches are no longer
    # their last), c commits, and every key is written again.
    c.commit()
    a.send([b"a-again"], [b"k5"], **ts)
    a.commit()
    b.send([b"b-again"], [b"k6"], **ts)
    b.commit()
    for key in (b"k1", b"k2", b"k5", b"k6"):
        plain(lg, clock, key, b"new")
    lg.roll()
    store.clean_once()
    # Past the horizon: the markers of transactions with no batch left go (b's abort with
    # its entry, a's first commit); d's abort stays, emptied: its bumped epoch is d's last
    # record. A transaction whose batch stays as its producer's last (an empty header)
    # keeps its marker, as Kafka's CleanedTransactionMetadata does.
    clock.advance(120_000)
    plain(lg, clock, b"other", b"y")
    lg.roll()
    store.clean_once()
    assert markers(lg) == [(4, 0, 0), (3, "commit", 1), (1, "commit", 1), (2, "commit", 1)]
    assert txnindex(lg) == []
    headers = {x.producer_id: x.records_count for x in batches(lg) if x.producer_id in (1, 2, 3)
               and not x.is_control}
    assert headers == {1: 0, 2: 0, 3: 0}
    assert len([x for x in batches(lg) if x.producer_id == 1 and not x.is_control]) == 1
    assert data(lg) == [(b"filler", b"x" * 100)] + [(k, b"new") for k in (b"k1", b"k2", b"k5",
                                                                          b"k6")] + [(b"other", b"y")]
