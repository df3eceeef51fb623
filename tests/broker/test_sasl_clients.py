"""The real clients against `pylog serve` with a SASL_PLAINTEXT listener, with
SCRAM-SHA-512 and PLAIN: kcat, confluent-kafka, kafka-python and aiokafka produce,
consume in a group and administer (topics, SCRAM users with AlterUserScramCredentials);
a wrong password gets Kafka's SASL_AUTHENTICATION_FAILED and never data. With
connections.max.reauth.ms (an in-process broker, whose counters the test reads) the
clients that speak KIP-368 re-authenticate on their connections and keep consuming.
Kafka's Java clients and tools: tests/kafka_reference/test_sasl_tools.py."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
import uuid

import pytest

import pylog
from pylog.common import scram
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient
from pylog.remote.sasl import SaslLogin

from .conftest import need_kcat
from .process import ServeProcess

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
LOGINS = {"SCRAM-SHA-512": ("alice", "alice-secret"), "PLAIN": ("admin", "admin-secret")}
FAILED = {"SCRAM-SHA-512": "Authentication failed during authentication due to invalid "
                           "credentials with SASL mechanism SCRAM-SHA-512",
          "PLAIN": "Authentication failed: Invalid username or password"}


class Served:
    """`pylog serve` in a child process; the test's own view goes through an
    authenticated admin connection, and the stored records through a read-only reader."""

    ADMIN = SaslLogin("PLAIN", "admin", "admin-secret")

    def __init__(self, data: str, process: ServeProcess) -> None:
        self.data, self.process, self.bootstrap_servers = data, process, process.bootstrap

    def create_topic(self, topic: str, records: list[bytes] = ()) -> None:
        with ProtocolClient(self.bootstrap_servers, authenticate=self.ADMIN) as client:
            answer = client.request(19, m.CreateTopicsRequest(timeout_ms=10000, topics=[
                m.CreateTopicsRequestCreatableTopic(name=topic, num_partitions=1, replication_factor=1,
                                                    assignments=[], configs=[])]), 4)
            assert answer.topics[0].error_code == 0
            if records:
                assert client.produce(topic, 0, pylog.records.encode_batch(list(records))).error_code == 0

    def stored(self, topic: str) -> list[bytes]:
        with pylog.storage.LogDirsReader(self.data) as reader:
            part = reader.partition(topic, 0)
            return [v for table in part.read_arrow(0, part.log_end_offset())
                    for v in table.column("value").to_pylist()]

    def committed(self, group: str, topic: str) -> int:
        with ProtocolClient(self.bootstrap_servers, authenticate=self.ADMIN) as client:
            answer = client.request(9, m.OffsetFetchRequest(group_id=group, topics=[
                m.OffsetFetchRequestOffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 5)
            return answer.topics[0].partitions[0].committed_offset


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("sasl-clients"))
    with pylog.open(data) as store:
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        store.alter_user_scram_credentials(upsertions=[("alice", mech.name, scram.new_credential(mech, "alice-secret"))])
    with ServeProcess(data, "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                      f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                      "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500",
                      listen="SASL_PLAINTEXT://127.0.0.1:0") as process:
        yield Served(data, process)
        assert process.alive()


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def librdkafka(bootstrap: str, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def python_kwargs(mechanism: str, user: str, password: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


# ================================================================ confluent-kafka

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_administers_produces_and_consumes_in_a_group(served, mechanism):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (
        AdminClient,
        NewTopic,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    broker = served
    config = librdkafka(broker.bootstrap_servers, mechanism, *LOGINS[mechanism])
    admin = AdminClient(config)
    topic = topic_name()
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    # A new SCRAM user, salted by the client (the password never reaches the broker).
    user = f"u-{mechanism.lower()}"
    done = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"u-secret")])
    done[user].result(30)
    described = admin.describe_user_scram_credentials([user])[user].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 8192)]
    producer = Producer({**config, "linger.ms": 5})
    for v in values(50, mechanism):
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    consumer = Consumer({**librdkafka(broker.bootstrap_servers, "SCRAM-SHA-256", user, "u-secret"),
                         "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got == values(50, mechanism)
    assert broker.committed(f"g-{topic}", topic) == 50


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_confluent_kafka_with_a_wrong_password_gets_kafkas_error_and_no_data(served, mechanism):
    from confluent_kafka import Consumer, KafkaError, Producer
    broker = served
    topic = topic_name()
    broker.create_topic(topic, [b"private"])
    user = LOGINS[mechanism][0]
    errors = []
    config = {**librdkafka(broker.bootstrap_servers, mechanism, user, "wrong"),
              "error_cb": errors.append}
    producer = Producer(config)
    producer.produce(topic, b"intruder")
    assert producer.flush(2) == 1                                   # never delivered
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = [consumer.poll(0.5) for _ in range(4)]
    consumer.close()
    assert not [msg for msg in got if msg is not None and msg.error() is None]
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth and FAILED[mechanism] in auth[0].str()
    assert broker.stored(topic) == [b"private"]


# ================================================================ kafka-python

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_administers_produces_and_consumes_in_a_group(served, mechanism):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.admin._users import ScramMechanism, UserScramCredentialUpsertion
    broker = served
    login = python_kwargs(mechanism, *LOGINS[mechanism])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, **login)
    topic = topic_name()
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        user = f"kp-{mechanism.lower()}"
        assert admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramMechanism.SCRAM_SHA_512, "kp-secret", iterations=4096)]) == {user: None}
        assert admin.describe_user_scram_credentials([user])[user]["credential_infos"] == \
            [{"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 4096}]
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, **login)
    for v in values(40, mechanism):
        producer.send(topic, v)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **python_kwargs("SCRAM-SHA-512", user, "kp-secret"))
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == 40:
            break
    consumer.commit()
    consumer.close()
    assert got == values(40, mechanism)
    assert broker.committed(f"g-{topic}", topic) == 40


def test_kafka_python_with_a_wrong_password_gets_sasl_authentication_failed(served, caplog):
    """kafka-python retries until its timeout, logging each SaslAuthenticationFailedError
    with Kafka's message, and gets no data. (It sometimes reports "socket disconnected"
    instead: it can lose the answer that arrives with the broker's FIN, which Kafka's
    broker sends the same way; strace shows pylog's answer sent each time.)"""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    broker = served
    topic = topic_name()
    broker.create_topic(topic, [b"private"])
    import gc

    from kafka.net.selector import NetworkSelector

    def saw_kafkas_error() -> bool:
        return any("SaslAuthenticationFailedError" in r.getMessage()
                   and FAILED["SCRAM-SHA-512"] in r.getMessage() for r in caplog.records)

    # A loaded machine leaves time for few attempts in one constructor's timeout, and each
    # may lose the answer to the FIN: constructors until one logs Kafka's error (a deadline,
    # not a count: beside other xdist workers three in a row lost it), each with no data.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with caplog.at_level(logging.WARNING, "kafka"), pytest.raises(KafkaError):
            KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, bootstrap_timeout_ms=4000,
                          auto_offset_reset="earliest", **python_kwargs("SCRAM-SHA-512", "alice", "wrong"))
        # A constructor that fails leaves its network selector (a thread, a socket pair) open.
        for leaked in [o for o in gc.get_objects() if isinstance(o, NetworkSelector)]:
            leaked.close()
        if saw_kafkas_error():
            break
    assert saw_kafkas_error()


# ================================================================ aiokafka

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_produces_and_consumes_in_a_group(served, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    broker = served
    topic = topic_name()
    broker.create_topic(topic)
    login = python_kwargs(mechanism, *LOGINS[mechanism])

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, **login)
        await producer.start()
        try:
            for v in values(30, mechanism):
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", **login)
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 30:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == values(30, mechanism)
    assert broker.committed(f"g-{topic}", topic) == 30


def test_aiokafka_with_a_wrong_password_fails_with_kafkas_error(served, caplog):
    """aiokafka's start() fails ("Unable to bootstrap"), having logged the broker's
    SASL_AUTHENTICATION_FAILED with Kafka's message."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError
    broker = served

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=5000,
                                    **python_kwargs("PLAIN", "admin", "wrong"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, "aiokafka"), pytest.raises(KafkaError):
        asyncio.run(run())
    assert any("[Error 58] SaslAuthenticationFailed: " + FAILED["PLAIN"] in r.getMessage()
               for r in caplog.records)


# ================================================================ kcat

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kcat_produces_and_consumes_in_a_group(served, mechanism):
    kcat = need_kcat()
    broker = served
    topic = topic_name()
    broker.create_topic(topic)
    user, password = LOGINS[mechanism]
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    lines = b"".join(v + b"\n" for v in values(25, mechanism))
    subprocess.run([kcat, "-P", "-b", broker.bootstrap_servers, "-t", topic, *auth], input=lines,
                   check=True, timeout=60, capture_output=True)
    assert broker.stored(topic) == values(25, mechanism)
    run = subprocess.run([kcat, "-C", "-b", broker.bootstrap_servers, "-t", topic, "-e", "-o", "beginning",
                          *auth], check=True, timeout=60, capture_output=True)
    assert run.stdout.split() == values(25, mechanism)
    group = subprocess.run([kcat, "-G", f"g-{topic}", "-b", broker.bootstrap_servers, "-e",
                            "-X", "auto.offset.reset=earliest", *auth, topic],
                           check=True, timeout=60, capture_output=True)
    assert group.stdout.split() == values(25, mechanism)


def test_kcat_with_a_wrong_password_gets_kafkas_message_and_no_data(served):
    kcat = need_kcat()
    broker = served
    topic = topic_name()
    broker.create_topic(topic, [b"private"])
    run = subprocess.run([kcat, "-C", "-b", broker.bootstrap_servers, "-t", topic, "-e", "-o", "beginning",
                          "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT",
                          "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
                          "-X", "sasl.password=wrong"], timeout=60, capture_output=True)
    assert b"private" not in run.stdout
    assert FAILED["SCRAM-SHA-512"].encode() in run.stderr


# ================================================================ KIP-368

@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("reauth-clients")))
    mech = scram.MECHANISMS["SCRAM-SHA-512"]
    store.alter_user_scram_credentials(upsertions=[("alice", mech.name, scram.new_credential(mech, "alice-secret"))])
    broker = pylog.Broker(store, listen="SASL_PLAINTEXT://127.0.0.1:0", config={
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "connections.max.reauth.ms": 2000,
        "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_clients_reauthenticate_and_keep_consuming_past_the_session_lifetime(short_sessions, client):
    """librdkafka 2.16 and kafka-python 3 speak KIP-368: told a 2 s session, they
    re-authenticate on the same connections (the broker counts it) and no connection is
    killed for an expired session while a producer and a group consumer work for 7 s."""
    store, broker = short_sessions
    topic = topic_name()
    store.create_topic(topic, 1)
    before = dict(broker.stats)
    got: list[bytes] = []
    if client == "confluent":
        from confluent_kafka import Consumer, Producer
        config = librdkafka(broker.bootstrap_servers, "SCRAM-SHA-512", "alice", "alice-secret")
        producer = Producer(config)
        consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 7
        i = 0
        while time.monotonic() < deadline:
            producer.produce(topic, b"%d" % i)
            producer.flush(5)
            i += 1
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        while len(got) < i and (msg := consumer.poll(2)) is not None:
            if msg.error() is None:
                got.append(msg.value())
        consumer.close()
    else:
        from kafka import KafkaConsumer, KafkaProducer
        login = python_kwargs("SCRAM-SHA-512", "alice", "alice-secret")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, **login)
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}",
                                 auto_offset_reset="earliest", **login)
        deadline = time.monotonic() + 7
        i = 0
        while time.monotonic() < deadline:
            producer.send(topic, b"%d" % i).get(10)
            i += 1
            for records in consumer.poll(300).values():
                got += [r.value for r in records]
        while len(got) < i:
            polled = consumer.poll(2000)
            if not polled:
                break
            for records in polled.values():
                got += [r.value for r in records]
        consumer.close()
        producer.close()
    assert got == [b"%d" % n for n in range(i)]
    assert broker.stats["sasl.reauthentications"] - before.get("sasl.reauthentications", 0) >= 2
    assert broker.stats["sasl.expired_connections_killed"] == before.get("sasl.expired_connections_killed", 0)


# ================================================================ durability

def test_scram_users_survive_kill_9(tmp_path):
    """A credential is in every log dir before AlterUserScramCredentials is answered: a
    user added (and another deleted) over the wire logs in, and the deleted one does not,
    after kill -9 of `pylog serve` and a restart."""
    from pylog.protocol.client import ProtocolError
    data = str(tmp_path)
    overrides = ("sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                 f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}")
    mech = scram.MECHANISMS["SCRAM-SHA-512"]
    with pylog.open(data) as store:
        store.alter_user_scram_credentials(upsertions=[("gone", mech.name, scram.new_credential(mech, "g"))])
    process = ServeProcess(data, *overrides, listen="SASL_PLAINTEXT://127.0.0.1:0")
    try:
        with ProtocolClient(process.bootstrap, authenticate=Served.ADMIN) as client:
            salt = b"0123456789abcdef"
            answer = client.request(51, m.AlterUserScramCredentialsRequest(
                deletions=[m.AlterUserScramCredentialsRequestScramCredentialDeletion(name="gone", mechanism=2)],
                upsertions=[m.AlterUserScramCredentialsRequestScramCredentialUpsertion(
                    name="dora", mechanism=2, iterations=4096, salt=salt,
                    salted_password=scram.salted_password(mech, "dora-secret", salt, 4096))]), 0)
            assert {(r.user, r.error_code) for r in answer.results} == {("gone", 0), ("dora", 0)}
        process.kill()
    finally:
        process.stop()
    with ServeProcess(data, *overrides, listen="SASL_PLAINTEXT://127.0.0.1:0") as process:
        with ProtocolClient(process.bootstrap, authenticate=SaslLogin("SCRAM-SHA-512", "dora", "dora-secret")) as c:
            assert c.metadata().brokers
        with pytest.raises(ProtocolError, match="SASL_AUTHENTICATION_FAILED"):
            ProtocolClient(process.bootstrap, authenticate=SaslLogin("SCRAM-SHA-512", "gone", "g"))
