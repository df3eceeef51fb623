"""Kafka's Java Producer and Consumer against pylog's broker: idempotent produce with every
codec, the cooperative-sticky assignor, static membership (group.instance.id: a restart
within the session takes its partitions back with no rebalance, a second consumer with
the same instance id fences the first) and read_uncommitted; records byte-identical with
pylog's Consumer and kafka-python. (Transactions: test_java_transactions.py.)"""

from __future__ import annotations

import functools
import subprocess
import threading
import time
from pathlib import Path

import pytest

import pylog

from . import support
from .support import kafka_libs

# One worker for the module: its tests share one pylog broker.
pytestmark = pytest.mark.xdist_group("java-clients")

SOURCE = Path(__file__).resolve().parent / "java" / "JavaClients.java"


@functools.lru_cache(maxsize=None)
def compiled() -> str:
    """JavaClients.java compiled once per machine (support.compiled)."""
    return support.compiled(SOURCE)


def java_command(*args: str) -> list[str]:
    return ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j.configuration=file:/dev/null",
            "-cp", f"{compiled()}:{kafka_libs()}/*", "JavaClients", *args]


def java(*args: str, timeout: float = 180) -> list[str]:
    run = subprocess.run(java_command(*args), capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout.splitlines()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_java_producer_every_codec_idempotent(pylog_broker, codec):
    store, broker = pylog_broker
    topic = f"java-{codec}"
    store.create_topic(topic, 2)
    assert java("produce", broker.bootstrap_servers, topic, codec, "300") == ["SENT 300"]
    got = []
    for p in range(2):
        for batch in store.log(topic, p).read(0, 1 << 24).batches():
            assert batch.producer_id >= 0 and batch.base_sequence >= 0   # idempotent
            assert batch.compression == codec
            got += [(r.key, r.value, r.timestamp, [(k, bytes(v)) for k, v in r.headers])
                    for r in batch.records()]
    want = [(None if i % 4 == 0 else b"k%d" % (i % 9), b"java value %d" % i,
             1_700_000_000_000 + i, [("i", b"%d" % i)]) for i in range(300)]
    assert sorted(got, key=lambda r: r[2]) == want


def test_java_consumer_cooperative_sticky_static_member(pylog_broker):
    """Records kafka-python wrote reach the Java consumer byte for byte; a static member
    (group.instance.id) with the cooperative-sticky assignor commits, and a restart with the
    same instance id resumes at the committed offsets."""
    from kafka import KafkaProducer
    store, broker = pylog_broker
    store.create_topic("java-in", 3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    sent = {}
    for i in range(90):
        md = producer.send("java-in", key=b"key%d" % i, value=b"from kafka-python %d" % i,
                           headers=[("src", b"py")]).get(10)
        sent[(md.partition, md.offset)] = i
    producer.close()
    lines = java("consume", broker.bootstrap_servers, "java-in", "java-group", "member-1", "90")
    rows = [line.split("\t") for line in lines if line[0].isdigit()]
    assert lines[-2:] == ["ASSIGNED 3", "DONE 90"]
    assert len(rows) == 90
    for partition, offset, _ts, key, value, header in rows:
        i = sent[(int(partition), int(offset))]
        assert (key, value, header) == (f"key{i}", f"from kafka-python {i}", "src=py")
    committed = {p: store.committed("java-group", "java-in", p) for p in range(3)}
    assert sum(committed.values()) == 90
    # pylog's own Consumer reads the same bytes.
    consumer = pylog.Consumer(store, auto_offset_reset="earliest")
    consumer.assign([pylog.TopicPartition("java-in", p) for p in range(3)])
    mine = {}
    while got := consumer.poll(0.5):
        mine.update({(r.partition, r.offset): (r.key, r.value) for r in got})
    consumer.close()
    assert {k: (b"key%d" % i, b"from kafka-python %d" % i) for k, i in sent.items()} == mine
    # More records; the same static member resumes after its commits (no re-delivery).
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    for i in range(90, 120):
        producer.send("java-in", key=b"key%d" % i, value=b"from kafka-python %d" % i).get(10)
    producer.close()
    lines = java("consume", broker.bootstrap_servers, "java-in", "java-group", "member-1", "30")
    assert lines[-1] == "DONE 30"
    values = sorted(line.split("\t")[4] for line in lines if line[0].isdigit())
    assert values == sorted(f"from kafka-python {i}" for i in range(90, 120))


class JavaMember:
    """Kafka's Java consumer as a static member (JavaClients.java "member"), in its own JVM:
    its rebalance callbacks come back as lines, "close" on stdin closes it (a static
    member sends no LeaveGroup)."""

    def __init__(self, broker, topic: str, group: str, instance: str, session_ms: int = 120_000) -> None:
        self.proc = subprocess.Popen(
            java_command("member", broker.bootstrap_servers, topic, group, instance, str(session_ms)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.strip()))

    def owned(self) -> set[int] | None:
        """The partitions it owns by its callbacks (None before its first assignment)."""
        owned = None
        for _, line in list(self.lines):
            what, _, parts = line.partition(" ")
            got = {int(p) for p in parts.split(",") if p}
            if what == "ASSIGNED":
                owned = (owned or set()) | got
            elif what in ("REVOKED", "LOST"):
                owned = (owned or set()) - got
        return owned

    def saw(self, word: str) -> bool:
        return any(line.startswith(word) for _, line in list(self.lines))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:                     # a closed pipe the JVM left
                pass


def until(condition, what: str, timeout: float = 100) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not in {timeout}s: {what}"
        time.sleep(0.05)


def test_java_static_member_restarts_within_its_session_without_a_rebalance(pylog_broker):
    """KIP-345: a static member that restarts within session.timeout.ms gets its partition
    back at once, with no rebalance: the other member sees no revocation (eager range
    assignor: any rebalance would revoke everything)."""
    store, broker = pylog_broker
    store.create_topic("java-static", 2)
    a = JavaMember(broker, "java-static", "java-static-group", "a")
    b = JavaMember(broker, "java-static", "java-static-group", "b")
    restarted = None
    try:
        until(lambda: a.owned() is not None and len(a.owned()) == 1 and b.owned() is not None
              and len(b.owned()) == 1, "one partition each")
        time.sleep(1)                                   # the generation is settled
        group = store.coordinator.classic_group("java-static-group", create=False)
        generation = group.generation
        seen_by_a = len(a.lines)
        b_had = b.owned()
        b.close()
        start = time.monotonic()
        restarted = JavaMember(broker, "java-static", "java-static-group", "b")
        until(lambda: restarted.owned() == b_had, "the restarted member has its partition back")
        took = time.monotonic() - start
        time.sleep(1)
        assert a.lines[seen_by_a:] == [], f"the other member saw a rebalance: {a.lines[seen_by_a:]}"
        assert group.generation == generation
        # Well inside its 120 s session: it did not wait for the old id to expire.
        assert took < 100, f"{took:.1f}s (JVM start included)"
    finally:
        for member in (a, b, restarted):
            if member is not None:
                member.close()


def test_java_consumers_with_one_instance_id_fence_the_first(pylog_broker):
    store, broker = pylog_broker
    store.create_topic("java-fence", 1)
    first = JavaMember(broker, "java-fence", "java-fence-group", "same")
    second = None
    try:
        until(lambda: first.owned() == {0}, "the first member owns the partition")
        second = JavaMember(broker, "java-fence", "java-fence-group", "same")
        until(lambda: second.owned() == {0}, "the second takes the instance's partition")
        until(lambda: first.saw("FENCED"), "the first is fenced (FencedInstanceIdException)")
        group = store.coordinator.classic_group("java-fence-group", create=False)
        assert len(group.members) == 1
    finally:
        first.close()
        if second is not None:
            second.close()
