"""Remote mode: kafka.bootstrap.servers instead of path, against a pylog broker (the
store is owned by the broker; Spark's tasks talk Kafka's protocol to it)."""

from __future__ import annotations

import json

import pytest

from .support import require_pyspark

require_pyspark()

import pylog  # noqa: E402

from .support import produce  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("remote"))
    sent = produce(path, "events", 2000, compression="lz4")
    store = pylog.open(path)
    store.create_topic("out", partitions=3)
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield store, broker.bootstrap_servers, sent
    finally:
        broker.shutdown()
        store.close()


def test_remote_batch_read_equals_path_mode_data(spark, served):
    store, bootstrap, sent = served
    df = (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "events").option("includeHeaders", "true")
          .option("minPartitions", "4").load())
    rows = {(r.partition, r.offset): r for r in df.collect()}
    assert len(rows) == len(sent)
    for s in sent:
        r = rows[(s["partition"], s["offset"])]
        assert (None if r.key is None else bytes(r.key)) == s["key"]
        assert bytes(r.value) == s["value"]
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []] == \
            [tuple(h) for h in s["headers"]]
        assert round(r.timestamp.timestamp() * 1000) == s["timestamp_ms"]


def test_remote_offsets_and_streaming(spark, served, tmp_path):
    store, bootstrap, sent = served
    ends = {p: sum(s["partition"] == p for s in sent) for p in (0, 1)}
    df = (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", "events")
          .option("startingOffsets", json.dumps({"events": {"0": 5, "1": -2}}))
          .option("endingOffsets", json.dumps({"events": {"0": 25, "1": -1}})).load())
    assert df.count() == 20 + ends[1]
    query = (spark.readStream.format("pylog").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", "events").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "700").load()
             .selectExpr("partition", "offset").writeStream.format("parquet")
             .option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    got = {(r.partition, r.offset) for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert got == {(s["partition"], s["offset"]) for s in sent}


def test_remote_write_through_the_broker(spark, served):
    store, bootstrap, _ = served
    data = [(f"k{i % 7}", f"v{i}") for i in range(1500)]
    (spark.createDataFrame(data, "key string, value string").repartition(2).write
     .format("pylog").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", "out").save())
    consumer = pylog.Consumer(store, auto_offset_reset="earliest")
    consumer.assign([pylog.TopicPartition("out", p) for p in range(3)])
    values = []
    while True:
        got = consumer.poll(0.5)
        if not got:
            break
        values += [(r.key, r.value, r.partition) for r in got]
    consumer.close()
    from pylog.client.partitioner import key_partition
    assert sorted(v for _, v, _ in values) == sorted(v.encode() for _, v in data)
    assert all(p == key_partition(k, 3) for k, _, p in values)


def test_path_and_bootstrap_together_is_an_error(spark, served, tmp_path):
    _, bootstrap, _ = served
    with pytest.raises(Exception, match="exactly one of the log dirs"):
        (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", "events").load(str(tmp_path))).count()
    with pytest.raises(Exception, match="kafka.security.protocol.*remote mode"):
        (spark.read.format("pylog").option("kafka.security.protocol", "SSL")
         .option("subscribe", "events").load(str(tmp_path))).count()
    with pytest.raises(Exception, match="kafka.ssl.keystore.password.*not supported"):
        (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
         .option("kafka.ssl.keystore.password", "x").option("subscribe", "events").load()).count()


# ================================================================ TLS and SASL

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="alice" password="{}";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with one SASL_SSL listener (SCRAM-SHA-512), certificates made for the run."""
    from broker.tls_certs import make_certs

    from pylog.common import scram
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    path = str(tmp_path_factory.mktemp("secured"))
    sent = produce(path, "events", 500)
    store = pylog.open(path)
    mech = scram.MECHANISMS["SCRAM-SHA-512"]
    store.alter_user_scram_credentials(upsertions=[("alice", mech.name,
                                                    scram.new_credential(mech, "alice-secret"))])
    store.create_topic("out", partitions=2)
    broker = pylog.Broker(store, listen="SASL_SSL://127.0.0.1:0", config={
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": 0}).start()
    try:
        yield store, broker.bootstrap_servers, sent, certs
    finally:
        broker.shutdown()
        store.close()


def login(certs, password: str = "alice-secret") -> dict[str, str]:
    """Spark's Kafka connector's spelling: the Kafka client's keys prefixed with kafka."""
    return {"kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.location": str(certs.ca),
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": SCRAM_JAAS.format(password)}


def test_read_and_write_over_sasl_ssl(spark, secured):
    store, bootstrap, sent, certs = secured
    df = (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
          .options(**login(certs)).option("subscribe", "events").option("minPartitions", "3").load())
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect()) == \
        sorted((s["partition"], s["offset"], s["value"]) for s in sent)
    (spark.createDataFrame([(f"v{i}",) for i in range(300)], "value string").write
     .format("pylog").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .options(**login(certs)).option("topic", "out").save())
    consumer = pylog.Consumer(store, auto_offset_reset="earliest")
    consumer.assign([pylog.TopicPartition("out", p) for p in range(2)])
    got = []
    while batch := consumer.poll(0.5):
        got += [r.value for r in batch]
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(300))


def test_a_wrong_password_or_a_missing_trust_store_fails_on_the_driver(spark, secured, tmp_path):
    _, bootstrap, _, certs = secured
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED"):
        (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
         .options(**login(certs, "wrong")).option("subscribe", "events").load()).count()
    with pytest.raises(Exception, match="kafka.ssl.truststore.location"):
        (spark.read.format("pylog").option("kafka.bootstrap.servers", bootstrap)
         .options(**{**login(certs), "kafka.ssl.truststore.location": str(tmp_path / "none.pem")})
         .option("subscribe", "events").load()).count()
