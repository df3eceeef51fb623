"""Transactions v2 (KIP-890 part 2) on the wire, the same requests to Kafka 4.1's broker
and to pylog's: ApiVersions' ``transaction.version`` and the transaction APIs' versions,
then EndTxn v5 and Produce v12 through an empty commit and abort, a commit, its retry,
the retry as an abort, a Produce with the old epoch, an abort, an abort with nothing
added, an older epoch, a commit of nothing. The answers (error codes, epochs relative to
the first) are the same."""

from __future__ import annotations

import time

import pytest
from txn_support import txn_batch

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient


#: Kafka's retriable answers while its coordinator loads or its markers are in flight
#: (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
#: NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS): asked again, as a client does.
RETRIABLE = {14, 15, 16, 19, 51}
TRANSACTION_APIS = (22, 24, 25, 26, 28)


@pytest.fixture(scope="module")
def pylog_bootstrap(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("pylog-tv2")))
    broker = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.shutdown()
        store.close()


def features(client, version: int) -> tuple:
    resp = client.request(18, m.ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"), version)
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    return ([(f.name, f.min_version, f.max_version) for f in resp.supported_features
             if f.name == "transaction.version"],
            [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features
             if f.name == "transaction.version"],
            {k: versions[k] for k in TRANSACTION_APIS}, versions[0][1] >= 12)


def script(bootstrap: str) -> list[tuple]:
    """The steps' answers: (step, error code, epoch relative to InitProducerId's)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("tv2", 1, 1)])
    admin.close()
    tid = "tv2-probe"
    out: list[tuple] = []
    with ProtocolClient(bootstrap, timeout=30) as c:
        def retried(call):
            deadline = time.monotonic() + 60
            while True:
                resp = call()
                code = getattr(resp, "error_code", None)
                if code not in RETRIABLE or time.monotonic() > deadline:
                    return resp
                time.sleep(0.2)

        def init_producer_id():
            c.request(10, m.FindCoordinatorRequest(key=tid, key_type=1, coordinator_keys=[tid]))
            return c.request(22, m.InitProducerIdRequest(transactional_id=tid,
                                                         transaction_timeout_ms=60000), 5)

        init = retried(init_producer_id)
        assert init.error_code == 0, init
        pid, e0 = init.producer_id, init.producer_epoch

        def settle():
            """Waits out Kafka's markers in flight (PrepareCommit/PrepareAbort)."""
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                (state,) = c.request(65, m.DescribeTransactionsRequest(
                    transactional_ids=[tid])).transaction_states
                if not state.transaction_state.startswith("Prepare"):
                    return state
                time.sleep(0.2)
            raise AssertionError("the transaction stayed prepared")

        def end(step, epoch, committed):
            resp = retried(lambda: c.request(26, m.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=e0 + epoch,
                committed=committed), 5))
            settle()
            out.append((step, resp.error_code,
                        resp.producer_epoch - e0 if resp.producer_epoch >= 0 else None))

        def produce(step, epoch, seq):
            req = m.ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=30000, topic_data=[
                m.ProduceRequestTopicProduceData(name="tv2", partition_data=[
                    m.ProduceRequestPartitionProduceData(
                        index=0, records=txn_batch(pid, e0 + epoch, seq, [b"v"]))])])
            part = retried(lambda: c.request(0, req, 12).responses[0].partition_responses[0])
            out.append((step, part.error_code, None))

        end("commit of nothing (Empty)", 0, True)
        end("abort of nothing (Empty)", 0, False)
        produce("produce adds the partition", 1, 0)
        end("commit", 1, True)
        end("commit again, the old epoch: a retry", 1, True)
        end("abort with the old epoch", 1, False)
        produce("produce with the old epoch", 1, 1)
        produce("produce with the new epoch", 2, 0)
        end("abort", 2, False)
        end("abort of nothing (CompleteAbort)", 3, False)
        end("commit with an older epoch", 1, True)
        end("commit of nothing (CompleteAbort)", 4, True)
        out.append(("state", settle().transaction_state, settle().producer_epoch - e0))
    return out


def test_transactions_v2_answers_match_kafkas(running_kafka, pylog_bootstrap):
    kafka = running_kafka.bootstrap
    for version in (3, 4):                  # (v3 leaves out supported features from 0)
        with ProtocolClient(kafka) as k, ProtocolClient(pylog_bootstrap) as p:
            from_kafka, from_pylog = features(k, version), features(p, version)
        assert from_kafka[1] == [("transaction.version", 2, 2)]    # measured: Kafka 4.1
        assert from_pylog == from_kafka, version
    kafka_answers = script(kafka)
    assert kafka_answers[-1] == ("state", "CompleteAbort", 4), kafka_answers
    assert script(pylog_bootstrap) == kafka_answers
