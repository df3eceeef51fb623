"""kafka.isolation.level=read_committed on the pylog source (Spark's Kafka source option),
in path and remote mode: aborted transactions' records are skipped, nothing at or past
the last stable offset is read (an open transaction holds it), read_uncommitted reads
everything."""

from __future__ import annotations

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402

pytestmark = pytest.mark.spark

COMMITTED = [b"a0", b"a1", b"a2", b"a3", b"c0", b"c1"]
ABORTED = [b"b0", b"b1", b"b2"]
OPEN = [b"d0", b"d1"]


@pytest.fixture(scope="module")
def txn_store(tmp_path_factory):
    """Committed, aborted, committed, then a transaction left open, over 2 partitions;
    also served by a broker."""
    path = str(tmp_path_factory.mktemp("txn-spark"))
    store = pylog.open(path)
    store.create_topic("tx", 2)
    producer = pylog.Producer(store, transactional_id="spark-tx", linger_ms=1)
    producer.init_transactions()
    for values, commit in ((COMMITTED[:4], True), (ABORTED, False), (COMMITTED[4:], True)):
        producer.begin_transaction()
        for i, v in enumerate(values):
            producer.send("tx", v, partition=i % 2)
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.begin_transaction()
    for i, v in enumerate(OPEN):
        producer.send("tx", v, partition=i % 2)
    producer.flush()
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield path, broker.bootstrap_servers, store
    finally:
        broker.shutdown()
        producer.close()
        store.close()


def _read(spark, where: dict, isolation: str | None):
    reader = spark.read.format("pylog").option("subscribe", "tx")
    for k, v in where.items():
        reader = reader.option(k, v)
    if isolation is not None:
        reader = reader.option("kafka.isolation.level", isolation)
    return reader.load().collect()


@pytest.mark.parametrize("mode", ["path", "remote"])
def test_read_committed_skips_aborted_and_stops_at_the_lso(spark, txn_store, mode):
    path, bootstrap, store = txn_store
    where = {"path": path} if mode == "path" else {"kafka.bootstrap.servers": bootstrap}
    rows = _read(spark, where, "read_committed")
    assert sorted(bytes(r.value) for r in rows) == sorted(COMMITTED)
    for part in range(2):
        lso = store.log("tx", part).last_stable_offset
        assert all(r.offset < lso for r in rows if r.partition == part)
    everything = _read(spark, where, None)             # read_uncommitted, the default
    assert sorted(bytes(r.value) for r in everything) == sorted(COMMITTED + ABORTED + OPEN)


def test_a_bad_isolation_level_is_named(spark, txn_store):
    path, _, _ = txn_store
    with pytest.raises(Exception, match="kafka.isolation.level.* must be read_uncommitted or read_committed"):
        _read(spark, {"path": path}, "serializable")
