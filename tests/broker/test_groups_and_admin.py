"""Consumer groups and admin APIs with real clients.

Groups: two members split a topic's partitions; when one leaves, the other takes
them over and resumes from the offsets committed; a member that stops heartbeating
is evicted after its session timeout; offsets committed remotely are the store's.
Admin: create/list/describe/alter/delete topics, partitions and groups, DeleteRecords.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pylog

from .clients import Rec, produce

# How long a wait for a group's state may take before the test fails: a passing test waits
# only until the state is reached; a loaded machine starves a client's event loop for tens
# of seconds (a kafka-python rebalance took over 30 s beside two other xdist workers).
DEADLINE = 120

FAST_GROUP = dict(session_timeout_ms=6000, heartbeat_interval_ms=200, max_poll_interval_ms=10_000,
                  auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100)


def kp_consumer(served, topic, group, **kw):
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, group_id=group,
                             **{**FAST_GROUP, **kw})
    # The topic's metadata first: a kafka-python group leader that joins before it has
    # it assigns nothing ("No partition metadata for topic", seen once in CI).
    assert consumer.partitions_for_topic(topic)
    consumer.subscribe([topic])
    return consumer


def fill(served, topic, partitions, per_partition):
    for p in range(partitions):
        produce("kafka-python", served.bootstrap, topic,
                [Rec(b"k", b"%d-%d" % (p, i)) for i in range(per_partition)], partition=p)


def poll_until(consumers, predicate, timeout=DEADLINE):
    """Polls (from this thread) until `predicate(got)`; for one consumer, or consumers
    that need no rebalance meanwhile (see Member for groups)."""
    got = {id(c): [] for c in consumers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            for recs in c.poll(100).values():
                got[id(c)] += recs
        if predicate(got):
            return got
    raise AssertionError(f"condition not met in {timeout}s: "
                         f"{ {k: len(v) for k, v in got.items()} }")


class _Polled:
    def __init__(self, partition: int, offset: int) -> None:
        self.partition, self.offset = partition, offset


class ConfluentConsumer:
    """confluent-kafka's Consumer behind kafka-python's poll/assignment/commit shapes."""

    def __init__(self, served, topic, group) -> None:
        import confluent_kafka as ck
        self.c = ck.Consumer({"bootstrap.servers": served.bootstrap, "group.id": group,
                              "auto.offset.reset": "earliest", "enable.auto.commit": False,
                              "session.timeout.ms": 3000, "heartbeat.interval.ms": 200,
                              "partition.assignment.strategy": "range"})
        self.c.subscribe([topic])

    def poll(self, timeout_ms):
        msgs = self.c.consume(100, timeout_ms / 1000)
        return {0: [_Polled(m.partition(), m.offset()) for m in msgs if not m.error()]}

    def assignment(self):
        return self.c.assignment()

    def commit(self):
        self.c.commit(asynchronous=False)

    def unsubscribe(self):
        self.c.unsubscribe()

    def close(self):
        self.c.close()


class Member:
    """A group member polling on its own thread, as an application's consumer does
    (a poll blocks while its JoinGroup waits for the other members)."""

    def __init__(self, served, topic, group, client: str = "kafka-python") -> None:
        self.consumer = kp_consumer(served, topic, group) if client == "kafka-python" \
            else ConfluentConsumer(served, topic, group)
        self.records = []
        self.assignment = set()
        self._calls = queue.Queue()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                fn, done = self._calls.get_nowait()
                done.append(fn(self.consumer))
            except queue.Empty:
                pass
            for recs in self.consumer.poll(100).values():
                self.records += recs
            self.assignment = {tp.partition for tp in self.consumer.assignment()}

    def call(self, fn):
        done = []
        self._calls.put((fn, done))
        deadline = time.monotonic() + DEADLINE
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
        return done[0]

    def close(self) -> None:
        if not self._stop:
            self._stop = True
            self._thread.join(30)
            self.consumer.close()


def wait_for(condition, what, timeout=DEADLINE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not in {timeout}s: {what}")


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_two_members_split_then_one_takes_over_from_committed_offsets(served, client):
    topic = served.topic(partitions=4)
    group = f"split-{client}"
    a = Member(served, topic, group, client)
    b = Member(served, topic, group, client)
    try:
        wait_for(lambda: len(a.assignment) == 2 and len(b.assignment) == 2,
                 "two members with two partitions each")
        fill(served, topic, 4, 10)
        wait_for(lambda: len(a.records) + len(b.records) == 40, "every record")
        assert not a.assignment & b.assignment
        # Every record once, each from the member that owns its partition.
        assert sorted((r.partition, r.offset) for m in (a, b) for r in m.records) == \
            [(p, o) for p in range(4) for o in range(10)]
        for m in (a, b):
            assert {r.partition for r in m.records} == m.assignment
        a.call(lambda c: c.commit())
        b.call(lambda c: c.commit())
        owned_by_b = sorted(b.assignment)
        # The broker stored the commits in the store's __consumer_offsets.
        assert {p: served.store.committed(group, topic, p) for p in range(4)} == {p: 10 for p in range(4)}
        fill(served, topic, 4, 5)                 # 5 more per partition
        wait_for(lambda: len(a.records) + len(b.records) == 60, "the new records")
        b.call(lambda c: c.unsubscribe())          # leaves without committing the last 5
        b.close()
        wait_for(lambda: len(a.assignment) == 4, "a takes over every partition")
        wait_for(lambda: len([r for r in a.records if r.partition in owned_by_b]) == 10, "a re-reads b's")
        taken = [r for r in a.records if r.partition in owned_by_b]
        # Resumed exactly at b's committed offsets: the 5 uncommitted records again, once.
        assert sorted((r.partition, r.offset) for r in taken) == \
            [(p, o) for p in owned_by_b for o in range(10, 15)]
    finally:
        a.close()
        b.close()


def test_a_pylog_consumer_and_a_kafka_python_consumer_share_a_group(served):
    topic = served.topic(partitions=2)
    remote = Member(served, topic, "mixed")
    local = pylog.Consumer(served.store, group_id="mixed", auto_offset_reset="earliest",
                           enable_auto_commit=False)
    mine = []
    try:
        wait_for(lambda: len(remote.assignment) == 2, "the remote member owns the topic")
        local.subscribe([topic])             # in-process: joins the same group through the bridge
        wait_for(lambda: len(remote.assignment) == 1 and len(local.assignment()) == 1,
                 "one partition each")
        assert {tp.partition for tp in local.assignment()} | remote.assignment == {0, 1}
        fill(served, topic, 2, 5)
        deadline = time.monotonic() + DEADLINE
        while (len(mine) < 5 or len(remote.records) < 5) and time.monotonic() < deadline:
            mine += local.poll(0.1)
        (local_partition,) = {tp.partition for tp in local.assignment()}
        assert sorted((r.partition, r.offset) for r in mine) == [(local_partition, o) for o in range(5)]
        assert sorted((r.partition, r.offset) for r in remote.records) == \
            [(1 - local_partition, o) for o in range(5)]
        local.commit()
        remote.call(lambda c: c.commit())
        remote.close()                        # leaves: the pylog Consumer takes both partitions
        wait_for(lambda: len(local.assignment()) == 2, "the pylog consumer owns the topic")
        fill(served, topic, 2, 5)
        deadline = time.monotonic() + DEADLINE
        while len(mine) < 15 and time.monotonic() < deadline:
            mine += local.poll(0.1)
        assert sorted((r.partition, r.offset) for r in mine[5:]) == \
            [(p, o) for p in range(2) for o in range(5, 10)]     # resumed at the committed offsets
    finally:
        local.close()
        remote.close()


def test_a_silent_member_is_evicted_after_its_session_timeout(served):
    topic = served.topic(partitions=2)
    fill(served, topic, 2, 3)
    # A member in another process, killed (no LeaveGroup): the broker must evict it.
    code = textwrap.dedent(f"""
        import sys, time
        from kafka import KafkaConsumer
        c = KafkaConsumer({topic!r}, bootstrap_servers={served.bootstrap!r}, group_id="evict",
                          session_timeout_ms=1500, heartbeat_interval_ms=200,
                          auto_offset_reset="earliest", enable_auto_commit=False)
        while not c.assignment():
            c.poll(100)
        print("joined", flush=True)
        while True:
            c.poll(100)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    with child.stdout:
        assert child.stdout.readline().strip() == "joined"
        survivor = kp_consumer(served, topic, "evict")
        try:
            poll_until([survivor], lambda g: len(survivor.assignment()) == 1)
            child.kill()
            child.wait()
            start = time.monotonic()
            poll_until([survivor], lambda g: len(survivor.assignment()) == 2)
            # Sooner than Kafka's default session (45 s): the member's own 1.5 s evicted it.
            assert time.monotonic() - start < 40
        finally:
            survivor.close()
            child.kill()
            child.wait()


def test_confluent_and_kafka_python_members_share_a_group(served):
    import confluent_kafka as ck
    topic = served.topic(partitions=2)
    fill(served, topic, 2, 5)
    c1 = ck.Consumer({"bootstrap.servers": served.bootstrap, "group.id": "mixed-clients",
                      "auto.offset.reset": "earliest", "session.timeout.ms": 3000,
                      "heartbeat.interval.ms": 200, "partition.assignment.strategy": "range"})
    c1.subscribe([topic])
    k = kp_consumer(served, topic, "mixed-clients")
    seen = []
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            msg = c1.poll(0.1)
            if msg is not None and not msg.error():
                seen.append((msg.partition(), msg.offset()))
            for recs in k.poll(50).values():
                seen += [(r.partition, r.offset) for r in recs]
            if len(k.assignment()) == 1 and len(set(seen)) == 10:
                break
        assert sorted(set(seen)) == [(p, o) for p in range(2) for o in range(5)]
        assert len(k.assignment()) == 1 and len(c1.assignment()) == 1
        assert k.assignment() != {pylog.TopicPartition(tp.topic, tp.partition) for tp in c1.assignment()}
    finally:
        c1.close()
        k.close()


def test_kcat_balanced_consumer(served):
    from .conftest import need_kcat
    topic = served.topic(partitions=2)
    fill(served, topic, 2, 4)
    out = subprocess.run([need_kcat(), "-b", served.bootstrap, "-G", "kcat-group", "-X",
                          "auto.offset.reset=earliest", "-e", "-q", "-f", "%p:%o\n", topic],
                         capture_output=True, timeout=60, check=True).stdout.decode().split()
    assert sorted(out) == sorted(f"{p}:{o}" for p in range(2) for o in range(4))
    assert served.store.committed("kcat-group", topic, 0) in (None, 4)   # kcat commits async


def test_admin_with_kafka_python(served):
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
    )
    from kafka.errors import TopicAlreadyExistsError
    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
    try:
        admin.create_topics([NewTopic("admin-kp", 3, 1, topic_configs={"retention.ms": "3600000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("admin-kp", 3, 1)])
        assert "admin-kp" in admin.list_topics()
        (desc,) = admin.describe_topics(["admin-kp"])
        assert len(desc["partitions"]) == 3
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "admin-kp")])
        text = str(configs)
        assert "retention.ms" in text and "3600000" in text
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "admin-kp",
                                            configs={"retention.ms": "7200000"})])
        assert served.store.describe_topic("admin-kp").config["retention.ms"] == 7200000
        admin.create_partitions({"admin-kp": NewPartitions(5)})
        assert served.store.partition_count("admin-kp") == 5
        admin.delete_topics(["admin-kp"])
        assert "admin-kp" not in served.store.list_topics()
        # Groups: list, describe, delete (an empty group with committed offsets).
        topic = served.topic()
        fill(served, topic, 1, 3)
        c = kp_consumer(served, topic, "to-delete")
        poll_until([c], lambda g: len(g[id(c)]) == 3)
        c.commit()
        c.close()
        assert "to-delete" in str(admin.list_groups())
        assert served.store.committed("to-delete", topic, 0) == 3
        admin.delete_groups(["to-delete"])
        assert served.store.committed("to-delete", topic, 0) is None
    finally:
        admin.close()


def test_admin_with_confluent(served):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    admin = AdminClient({"bootstrap.servers": served.bootstrap})
    futures = admin.create_topics([NewTopic("admin-ck", 2, 1, config={"cleanup.policy": "delete"})])
    futures["admin-ck"].result(30)
    bad = admin.create_topics([NewTopic("bad/name", 1, 1)])
    with pytest.raises(ck.KafkaException) as err:
        bad["bad/name"].result(30)
    assert err.value.args[0].code() == ck.KafkaError.TOPIC_EXCEPTION
    md = admin.list_topics(timeout=10)
    assert len(md.topics["admin-ck"].partitions) == 2
    res = ConfigResource("topic", "admin-ck")
    described = admin.describe_configs([res])[res].result(30)
    assert described["cleanup.policy"].value == "delete"
    admin.delete_topics(["admin-ck"])["admin-ck"].result(30)
    assert "admin-ck" not in served.store.list_topics()


def test_delete_records(served):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition
    topic = served.topic()
    fill(served, topic, 1, 10)
    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 4})
    finally:
        admin.close()
    assert served.store.log(topic, 0).log_start_offset == 4


def test_aiokafka_admin_and_group(served):
    import asyncio

    import aiokafka
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=served.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic("admin-aio", 2, 1), NewTopic("admin-aio-gone", 1, 1)])
            assert {"admin-aio", "admin-aio-gone"} <= set(await admin.list_topics())
            described = await admin.describe_topics(["admin-aio"])
            assert len(described[0]["partitions"]) == 2
            await admin.delete_topics(["admin-aio-gone"])
            assert "admin-aio-gone" not in served.store.list_topics()
        finally:
            await admin.close()
        fill(served, "admin-aio", 2, 3)
        c = aiokafka.AIOKafkaConsumer("admin-aio", bootstrap_servers=served.bootstrap, group_id="aio-g",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = []
            deadline = time.monotonic() + DEADLINE
            while len(got) < 6 and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    got += recs
            await c.commit()
        finally:
            await c.stop()
        return got

    got = asyncio.run(run())
    assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(2) for o in range(3)]
    assert served.store.committed("aio-g", "admin-aio", 1) == 3


def test_validate_only_checks_everything_and_changes_nothing(served):
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import InvalidPartitionsError, InvalidReplicationFactorError
    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
    try:
        admin.create_topics([NewTopic("only-validated", 2, 1)], validate_only=True)
        assert "only-validated" not in served.store.list_topics()
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("only-validated", 2, 3)], validate_only=True)
        topic = served.topic(partitions=2)
        admin.create_partitions({topic: NewPartitions(4)}, validate_only=True)
        assert served.store.partition_count(topic) == 2
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: NewPartitions(1)}, validate_only=True)
    finally:
        admin.close()
