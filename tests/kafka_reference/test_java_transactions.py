"""Kafka's Java transactional producer against pylog's broker (JavaClients.java "txn"),
read by Kafka's Java consumer with read_committed and read_uncommitted ("read"): commit,
abort, a zombie fenced by a new producer with the same transactional id, and a
transaction past transaction.timeout.ms aborted by the coordinator. Then
``kafka-transactions.sh`` lists, describes and aborts a hanging transaction, and Kafka's
DumpLogSegments decodes ``__transaction_state`` and the markers. The broker finalizes
``transaction.version`` 2, so Kafka 4's producer runs all of these with transactions v2
(KIP-890 part 2: Produce v12 adds partitions, EndTxn v5 bumps the epoch):
test_java_producer_runs_transactions_v2 checks that it did."""

from __future__ import annotations

import subprocess

import pytest

import pylog

from .support import run_tool
from .test_java_clients import java, java_command


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("pylog-txn")),
                       transaction_abort_timed_out_transaction_cleanup_interval_ms=200,
                       pylog_background_poll_ms=50)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()


def read(bootstrap: str, topic: str, isolation: str, count: int) -> list[str]:
    lines = java("read", bootstrap, topic, isolation, str(count))
    assert lines[-1] == f"DONE {count}", lines[-5:]
    return sorted(lines[:-1])


def test_java_commit_and_abort_per_isolation_level(txn_broker):
    store, broker = txn_broker
    store.create_topic("jtx", 3)
    lines = java("txn", broker.bootstrap_servers, "java-tx", "jtx", "60000",
                 "commit:30,abort:20,commit:10")
    assert lines == ["INITIALIZED", "COMMITTED 0", "ABORTED 1", "COMMITTED 2"]
    committed = sorted([f"0-{i}" for i in range(30)] + [f"2-{i}" for i in range(10)])
    assert read(broker.bootstrap_servers, "jtx", "read_committed", 40) == committed
    assert read(broker.bootstrap_servers, "jtx", "read_uncommitted", 60) == \
        sorted(committed + [f"1-{i}" for i in range(20)])


def test_java_zombie_is_fenced(txn_broker):
    store, broker = txn_broker
    store.create_topic("jzombie", 2)
    zombie = subprocess.Popen(java_command("txn", broker.bootstrap_servers, "java-zombie",
                                           "jzombie", "60000", "open:4"),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert zombie.stdout.readline().strip() == "INITIALIZED"
        assert zombie.stdout.readline().strip() == "OPEN 0"
        # The same transactional id again: the epoch is bumped, the zombie's open
        # transaction aborted.
        assert java("txn", broker.bootstrap_servers, "java-zombie", "jzombie", "60000",
                    "commit:2") == ["INITIALIZED", "COMMITTED 0"]
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        line = zombie.stdout.readline().strip()
        assert line in ("FAILED org.apache.kafka.common.errors.ProducerFencedException",
                        "FAILED org.apache.kafka.common.errors.InvalidProducerEpochException"), line
        assert zombie.wait(60) == 0
    finally:
        if zombie.poll() is None:
            zombie.kill()
        zombie.wait()
        zombie.stdin.close()
        zombie.stdout.close()
    assert read(broker.bootstrap_servers, "jzombie", "read_committed", 2) == ["0-0", "0-1"]


def test_java_transaction_past_its_timeout_is_aborted(txn_broker):
    store, broker = txn_broker
    store.create_topic("jtimeout", 1)
    lines = java("txn", broker.bootstrap_servers, "java-timeout", "jtimeout", "1000",
                 "stall:3:4000")
    assert lines[0] == "INITIALIZED" and lines[1].startswith("FAILED "), lines
    log = store.log("jtimeout", 0)
    assert log.last_stable_offset == log.high_watermark == 4          # 3 records, ABORT
    assert read(broker.bootstrap_servers, "jtimeout", "read_uncommitted", 3) == \
        ["0-0", "0-1", "0-2"]
    assert java("read", broker.bootstrap_servers, "jtimeout", "read_committed", "1")[-1] == "DONE 0"


def test_kafka_transactions_tool_lists_describes_and_aborts_a_hanging_transaction(txn_broker):
    """list/describe/describe-producers show the Java producer's open transaction;
    find-hanging names only a transaction the coordinator does not know (one opened in a
    partition through the storage API, as a lost marker leaves it), and abort ends it."""
    from txn_support import TxnProducer
    store, broker = txn_broker
    b = ("--bootstrap-server", broker.bootstrap_servers)
    store.create_topic("jhang", 2)
    hanging = subprocess.Popen(java_command("txn", broker.bootstrap_servers, "java-open",
                                            "jhang", "600000", "open:2"),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hanging.stdout.readline().strip() == "INITIALIZED"
        assert hanging.stdout.readline().strip() == "OPEN 0"
        java_pid = store.transactions.describe("java-open").producer_id
        lost_pid, _ = store.init_producer_id()
        lost = store.log("jhang", 1)
        TxnProducer(lost, lost_pid).send([b"lost-1", b"lost-2"])
        assert lost.last_stable_offset < lost.high_watermark
        listed = run_tool("kafka-transactions", *b, "list").stdout
        assert "java-open" in listed and "Ongoing" in listed, listed
        described = run_tool("kafka-transactions", *b, "describe", "--transactional-id",
                             "java-open").stdout
        assert "Ongoing" in described and "jhang-0" in described, described
        producers = run_tool("kafka-transactions", *b, "describe-producers", "--topic", "jhang",
                             "--partition", "0").stdout
        assert str(java_pid) in producers, producers
        hang = run_tool("kafka-transactions", *b, "find-hanging", "--broker-id",
                        str(broker.node_id), "--max-transaction-timeout", "0").stdout
        rows = [[f.strip() for f in line.split("\t")] for line in hang.splitlines()[1:]
                if line.strip()]
        # (Java's record 0-1 is at offset 0 of partition 1, in its known transaction.)
        assert [r[:3] + r[5:6] for r in rows] == [["jhang", "1", str(lost_pid), "1"]], hang
        run_tool("kafka-transactions", *b, "abort", "--topic", "jhang", "--partition", "1",
                 "--start-offset", "1")
        assert [p.producer_id for p in lost.ongoing_transactions()] == [java_pid]
        assert lost.high_watermark == 4          # Java's record, the 2 lost ones, the ABORT
        assert store.transactions.describe("java-open").state.kafka_name == "Ongoing"
    finally:
        hanging.kill()
        hanging.wait()
        hanging.stdin.close()
        hanging.stdout.close()


def test_kafka_dump_log_decodes_transaction_state(txn_broker):
    """Kafka's DumpLogSegments --transaction-log-decoder reads pylog's __transaction_state
    (Kafka's TransactionLogKey/Value) and the markers in a data partition."""
    from pylog.coordinator.transaction_state import partition_for_transactional_id
    store, broker = txn_broker
    store.create_topic("jdump", 1)
    assert java("txn", broker.bootstrap_servers, "java-dump", "jdump", "60000",
                "commit:2,abort:1") == ["INITIALIZED", "COMMITTED 0", "ABORTED 1"]
    part = partition_for_transactional_id("java-dump",
                                          store.partition_count("__transaction_state"))
    state_log = store.log("__transaction_state", part)
    state_log.flush()
    segment = f"{state_log.path}/{state_log.segments[0].base_offset:020d}.log"
    out = run_tool("kafka-dump-log", "--files", segment, "--transaction-log-decoder",
                   "--print-data-log").stdout
    import json
    decoded = [json.loads(line.split(" payload: ", 1)[1]) for line in out.splitlines()
               if '"transactionalId":"java-dump"' in line and " payload: " in line]
    # Kafka's decoder read every field: the states (TransactionState ids) in order, and
    # the partitions of the ongoing and prepared ones.
    assert [d["data"]["transactionStatus"] for d in decoded] == [0, 1, 2, 4, 1, 3, 5], out[-3000:]
    assert decoded[1]["data"]["transactionPartitions"] == [{"topic": "jdump", "partitionIds": [0]}]
    assert {d["data"]["transactionTimeoutMs"] for d in decoded} == {60000}
    # Kafka 4.1's producer ran transactions v2: from its first transaction on, the values
    # are version 1 with their tagged ClientTransactionVersion, which Kafka's decoder read.
    # Each EndTxn's Prepare record already carries the bumped epoch.
    assert [d["version"] for d in decoded] == ["0", "1", "1", "1", "1", "1", "1"], decoded
    assert [d["data"].get("clientTransactionVersion") for d in decoded[1:]] == [2] * 6, decoded
    assert [d["data"]["producerEpoch"] for d in decoded] == [0, 0, 1, 1, 1, 2, 2], decoded
    data = store.log("jdump", 0)
    data.flush()
    dumped = run_tool("kafka-dump-log", "--files",
                      f"{data.path}/{data.segments[0].base_offset:020d}.log",
                      "--print-data-log").stdout
    assert "endTxnMarker: COMMIT" in dumped and "endTxnMarker: ABORT" in dumped, dumped[-2000:]


def test_java_producer_runs_transactions_v2(txn_broker, monkeypatch):
    """Kafka 4.1's producer read transaction.version 2 from ApiVersions: it sent Produce
    v13 (v12+: transactions v2; v13: topics by id), TxnOffsetCommit v5 and EndTxn v5 and never AddPartitionsToTxn or
    AddOffsetsToTxn; every EndTxn bumped the epoch, each marker carries the epoch of its
    transaction's end, and the offsets sent with a committed transaction are the group's."""
    from pylog.broker import server
    seen: set[tuple[int, int]] = set()
    for key in (0, 24, 25, 26, 28):
        def spy(broker, conn, header, req, _handler=server.HANDLERS[key]):
            seen.add((header.api_key, header.api_version))
            return _handler(broker, conn, header, req)
        monkeypatch.setitem(server.HANDLERS, key, spy)
    store, broker = txn_broker
    store.create_topic("jtv2", 2)
    lines = java("txn", broker.bootstrap_servers, "java-tv2", "jtv2", "60000",
                 "commit:6,abort:4,offsets:2")
    assert lines == ["INITIALIZED", "COMMITTED 0", "ABORTED 1", "COMMITTED 2"]
    assert {(0, 13), (26, 5), (28, 5)} <= seen and not {k for k, _ in seen} & {24, 25}, seen
    assert {v for k, v in seen if k in (0, 26, 28)} == {13, 5}
    assert store.committed("java-tv2-group", "jtv2", 0) == 2
    meta = store.transactions.describe("java-tv2")
    assert meta.client_tv == 2 and meta.producer_epoch == 3        # epoch 0, then 3 EndTxn
    for partition in range(2):
        markers = [b.producer_epoch for b in
                   store.log("jtv2", partition).read(0, 1 << 24).batches() if b.is_control]
        assert markers == [1, 2, 3], markers
    assert read(broker.bootstrap_servers, "jtv2", "read_committed", 8) == \
        sorted([f"0-{i}" for i in range(6)] + ["2-0", "2-1"])


def test_java_producer_kill_9_of_the_broker_mid_transaction(tmp_path):
    """Kafka 4.1's producer (transactions v2) commits, then leaves a transaction open when
    `pylog serve` is killed with SIGKILL. After the restart read_committed shows only the
    committed one; a new producer with the same transactional id fences and aborts the
    open one (its records stay invisible to read_committed) and commits its own."""
    from broker.process import ServeProcess
    log_dir = str(tmp_path / "d")
    with ServeProcess(log_dir) as served:
        served_store_topic(served.bootstrap, "jcrash", 2)
        proc = subprocess.Popen(java_command("txn", served.bootstrap, "java-crash", "jcrash",
                                             "600000", "commit:3,open:4"),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert [proc.stdout.readline().strip() for _ in range(3)] == \
                ["INITIALIZED", "COMMITTED 0", "OPEN 1"]
            served.kill()
        finally:
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()
    with ServeProcess(log_dir) as served:
        assert read(served.bootstrap, "jcrash", "read_committed", 3) == ["0-0", "0-1", "0-2"]
        assert java("txn", served.bootstrap, "java-crash", "jcrash", "600000", "commit:2") == \
            ["INITIALIZED", "COMMITTED 0"]
        assert read(served.bootstrap, "jcrash", "read_committed", 5) == \
            ["0-0", "0-0", "0-1", "0-1", "0-2"]
        assert read(served.bootstrap, "jcrash", "read_uncommitted", 9) == \
            sorted(["0-0", "0-0", "0-1", "0-1", "0-2"] + [f"1-{i}" for i in range(4)])


def served_store_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
