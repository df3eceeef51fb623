"""Kafka's Java KafkaShareConsumer (kafka-clients 4.1, KIP-932) against pylog's broker: two
share consumers of one group sharing one partition, in explicit acknowledgement mode;
every record is accepted by exactly one of them, and a record released on its first
delivery comes back with delivery count 2 (tests/kafka_reference/java/ShareClients.java);
the group's share.auto.offset.reset set with kafka-configs --entity-type groups;
a Java share consumer beside pylog's in-process ShareConsumer in one group; and one of
a read_committed group (share.isolation.level) over committed, aborted and open
transactions."""

from __future__ import annotations

import functools
import subprocess
import threading
import time
from pathlib import Path

import pytest

import pylog
from pylog.coordinator.share_group import share_coordinator

from . import support
from .support import kafka_libs, run_tool

pytestmark = pytest.mark.xdist_group("java-clients")

SOURCE = Path(__file__).resolve().parent / "java" / "ShareClients.java"
N = 400
RELEASE_EVERY = 10


@functools.lru_cache(maxsize=None)
def compiled() -> str:
    """ShareClients.java compiled once per machine beside Kafka's jars (support.compiled)."""
    return support.compiled(SOURCE)


class JavaShareConsumer:
    """One KafkaShareConsumer in its own JVM; stdin closed = close it."""

    def __init__(self, bootstrap: str, topic: str, group: str, release_every: int = RELEASE_EVERY) -> None:
        cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j.configuration=file:/dev/null",
               "-cp", f"{compiled()}:{kafka_libs()}/*", "ShareClients",
               "share", bootstrap, topic, group, "20", str(release_every)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True)]
        for r in self._readers:
            r.start()

    @staticmethod
    def _read(pipe, into) -> None:
        for line in pipe:
            into.append(line.rstrip("\n"))

    def got(self) -> list[tuple[int, int, str]]:
        """(offset, delivery count, value) of each record delivered."""
        return [(int(p[2]), int(p[3]), p[4]) for p in (ln.split(" ", 4) for ln in list(self.lines))
                if p[0] == "GOT"]

    def accepted(self) -> list[int]:
        return [int(ln.split()[2]) for ln in list(self.lines) if ln.startswith("ACCEPTED ")]

    def close(self, timeout: float = 60) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for r in self._readers:
            r.join(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


def until(predicate, what: str, timeout: float, consumers=()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    detail = "\n".join(f"consumer {i}: {c.lines[-5:]} {c.errors[-20:]}" for i, c in enumerate(consumers))
    raise AssertionError(f"timed out waiting for {what}\n{detail}")


def test_two_java_share_consumers_share_a_partition(tmp_path):
    store = pylog.open(str(tmp_path / "store"))
    topic, group = "java-queue", "java-share-group"
    store.create_topic(topic, 1)
    shares = share_coordinator(store)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_share_heartbeat_interval_ms=500).start()
    consumers = []
    try:
        # Kafka's tool sets the group config (IncrementalAlterConfigs, resource type GROUP).
        run_tool("kafka-configs", "--bootstrap-server", broker.bootstrap_servers, "--entity-type",
                 "groups", "--entity-name", group, "--alter", "--add-config",
                 "share.auto.offset.reset=earliest")
        assert shares.group(group).configs == {"share.auto.offset.reset": "earliest"}
        consumers = [JavaShareConsumer(broker.bootstrap_servers, topic, group) for _ in range(2)]
        # Both members joined and fetching (a share session each) before any record exists,
        # so that neither takes everything before the other starts.
        until(lambda: len(shares.group(group).members) == 2 and
              sum(1 for g, _ in list(shares.sessions) if g == group) == 2,
              "both consumers in the group with share sessions", 180, consumers)
        with pylog.Producer(store, linger_ms=0) as producer:
            for i in range(0, N, 10):
                producer.send_batch(topic, [b"v%d" % j for j in range(i, i + 10)], partition=0)
        until(lambda: len(set(consumers[0].accepted()) | set(consumers[1].accepted())) >= N,
              "every record accepted", 180, consumers)
    finally:
        for c in consumers:
            c.close()
        broker.shutdown()
    for c in consumers:
        assert not [ln for ln in c.lines if ln.startswith("ACKFAIL")], c.lines
    accepted = consumers[0].accepted() + consumers[1].accepted()
    assert sorted(accepted) == list(range(N))                  # each accepted exactly once
    assert all(c.accepted() for c in consumers)                # both took a share
    got = consumers[0].got() + consumers[1].got()
    assert all(value == "v%d" % offset for offset, _, value in got)
    released = {o for o in range(N) if o % RELEASE_EVERY == 0}
    assert {(o, n) for o, n, _ in got if o in released} >= {(o, 1) for o in released} | {(o, 2) for o in released}
    assert all(n == 1 for o, n, _ in got if o not in released)
    sp = shares.group(group).partitions[(topic, 0)]
    assert (sp.start_offset, sp.end_offset) == (N, N)
    store.close()


def test_a_java_share_consumer_beside_pylog_share_consumer(tmp_path):
    store = pylog.open(str(tmp_path / "store"))
    topic, group = "mixed-queue", "mixed-share-group"
    store.create_topic(topic, 1)
    shares = share_coordinator(store)
    shares.group(group).set_configs({"share.auto.offset.reset": "earliest"})
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_share_heartbeat_interval_ms=500).start()
    java_consumer = None
    local = pylog.ShareConsumer(store, topic, group_id=group, max_poll_records=20,
                                share_acknowledgement_mode="explicit")
    local_accepted: list[int] = []
    stop = threading.Event()

    def consume_locally():
        while not stop.is_set():
            records = local.poll(0.2)
            for r in records:
                local.acknowledge(r)
            if records and all(v is None for v in local.commit_sync().values()):
                local_accepted.extend(r.offset for r in records)
            stop.wait(0.01)             # a slower member: the Java one gets a share too

    worker = threading.Thread(target=consume_locally)
    try:
        java_consumer = JavaShareConsumer(broker.bootstrap_servers, topic, group, release_every=0)
        until(lambda: len(shares.group(group).members) == 2 and
              any(g == group for g, _ in list(shares.sessions)),
              "the Java consumer in the group with a share session", 180, [java_consumer])
        worker.start()
        with pylog.Producer(store, linger_ms=0) as producer:
            for i in range(0, N, 10):
                producer.send_batch(topic, [b"v%d" % j for j in range(i, i + 10)], partition=0)
        until(lambda: len(set(java_consumer.accepted()) | set(local_accepted)) >= N,
              "every record accepted", 180, [java_consumer])
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(30)
        local.close()
        if java_consumer is not None:
            java_consumer.close()
        broker.shutdown()
    assert java_consumer.accepted() and local_accepted            # both took a share
    assert sorted(java_consumer.accepted() + local_accepted) == list(range(N))
    store.close()


def test_a_java_share_consumer_of_a_read_committed_group(tmp_path):
    """share.isolation.level=read_committed set with kafka-configs: Kafka's share consumer
    gets the committed records only, never an aborted one nor one of a transaction still
    open, and its acknowledgements (the markers' offsets as gaps) move the share-partition
    to the last stable offset."""
    from txn_support import TxnProducer

    from pylog.record import encode_batch

    store = pylog.open(str(tmp_path / "store"))
    topic, group = "txn-queue", "txn-share-group"
    store.create_topic(topic, 1)
    log = store.log(topic, 0)
    a, b, c = TxnProducer(log, pid=1), TxnProducer(log, pid=2), TxnProducer(log, pid=3)
    log.append(encode_batch([b"plain-0"]))           # 0
    a.send([b"a-0", b"a-1"])                         # 1-2
    b.send([b"b-0"])                                 # 3
    a.commit()                                       # 4
    b.abort()                                        # 5
    log.append(encode_batch([b"plain-1"]))           # 6
    c.send([b"c-0"])                                 # 7: open, the LSO
    log.append(encode_batch([b"plain-2"]))           # 8
    shares = share_coordinator(store)
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_share_heartbeat_interval_ms=500).start()
    consumer = None
    try:
        run_tool("kafka-configs", "--bootstrap-server", broker.bootstrap_servers, "--entity-type",
                 "groups", "--entity-name", group, "--alter", "--add-config",
                 "share.auto.offset.reset=earliest,share.isolation.level=read_committed")
        assert shares.group(group).config("share.isolation.level") == "read_committed"
        consumer = JavaShareConsumer(broker.bootstrap_servers, topic, group, release_every=0)
        until(lambda: len(consumer.accepted()) >= 4, "the committed records accepted", 180, [consumer])
        sp = shares.group(group).partitions[(topic, 0)]
        until(lambda: sp.start_offset == 7, "the share-partition at the LSO", 60, [consumer])
        c.commit()                                   # 9: c-0 and plain-2 are committed now
        until(lambda: len(consumer.accepted()) >= 6, "the records after the LSO", 60, [consumer])
    finally:
        if consumer is not None:
            consumer.close()
        broker.shutdown()
    assert not [ln for ln in consumer.lines if ln.startswith("ACKFAIL")], consumer.lines
    assert sorted(v for _, _, v in consumer.got()) == ["a-0", "a-1", "c-0", "plain-0", "plain-1", "plain-2"]
    store.close()
