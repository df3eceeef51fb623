"""The tools that read log dirs write nothing there (issue 42, item 16): after
``console-consumer``, ``dump-log``, ``verify`` and ``topics`` on a store's dirs (and
a standalone pylog.Log opened on each partition and closed), every file and
directory has the inode, size, mtime and bytes it had. The mtimes are first set to a
fixed past time (dir_listing.age), so a rewrite with the same bytes shows too.
Kafka's own dirs get the same check in tests/kafka_reference/test_real_kafka.py."""

from __future__ import annotations

import os

from dir_listing import age, changes, listing

import pylog
from pylog import records
from pylog.cli import main
from pylog.storage.log import Log


def build(d) -> list[bytes]:
    """A cleanly closed store: topic t with two partitions of several segments, an
    idempotent producer's batches (producer snapshots at each roll) and a plain one's."""
    values = []
    with pylog.open(str(d)) as store:
        store.create_topic("t", 2, config={"segment.bytes": 4000, "index.interval.bytes": 300})
        pid, epoch = store.init_producer_id()
        sequences = [0, 0]                   # the idempotent producer's, per partition
        for i in range(60):
            batch = [b"record %d-%d" % (i, j) for j in range(4)]
            values += batch
            p = i % 2
            if i % 3:
                encoded = records.encode_batch(batch, producer_id=pid, producer_epoch=epoch,
                                               base_sequence=sequences[p])
                sequences[p] += len(batch)
            else:
                encoded = records.encode_batch(batch)
            store.log("t", p).append(encoded)
    return values


def test_every_reader_leaves_a_store_as_it_was(tmp_path, capsys):
    d = tmp_path / "store"
    build(d)
    before = age(tmp_path)
    partition = d / "t-1"
    segment_files = sorted(str(partition / n) for n in os.listdir(partition)
                           if n.endswith((".log", ".index", ".timeindex", ".snapshot")))
    assert any(f.endswith(".snapshot") for f in segment_files)
    for args in (["console-consumer", "--log-dirs", str(d), "--topic", "t",
                  "--from-beginning", "--timeout-ms", "200"],
                 ["dump-log", "--files", ",".join(segment_files), "--print-data-log",
                  "--index-sanity-check"],
                 ["dump-log", "--files", str(d / "recovery-point-offset-checkpoint")],
                 ["verify", "--log-dirs", str(d)],
                 ["topics", "--log-dirs", str(d), "--list"],
                 ["topics", "--log-dirs", str(d), "--describe"]):
        assert main(args) == 0, (args, capsys.readouterr())
        assert changes(before, listing(tmp_path)) == [], args
    out = capsys.readouterr().out
    assert out.count("record ") >= 240
    for p in (0, 1):
        with Log(str(d / f"t-{p}")) as log:
            assert log.recovery.clean_shutdown is False      # a store's partition: no state file
            assert len(log.read(0, 1 << 20).records()) == 120
        assert changes(before, listing(tmp_path)) == [], p
