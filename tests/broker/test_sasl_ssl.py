"""The real clients against `pylog serve` with SASL_SSL (SCRAM-SHA-512 inside TLS) and
with mutual TLS, certificates made by openssl for the run: kcat, confluent-kafka,
kafka-python and aiokafka administer, produce, and consume in a group on each; a wrong
password gets Kafka's SASL_AUTHENTICATION_FAILED through TLS, and an untrusted or
expired certificate on either side fails the handshake; neither moves any data.
pylog's own tools speak SASL_SSL too (``ProtocolClient`` with ``ssl_context`` and
``authenticate``; ``pylog users --command-config``), and a connection's principal is
SASL's on SASL_SSL and the certificate's on SSL (conn.principal, in-process).
Kafka's Java tools over SASL_SSL: tests/kafka_reference/test_sasl_tools.py."""

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
from pylog.protocol.client import ProtocolClient, ProtocolError
from pylog.remote.sasl import SaslLogin

from .clients import CLIENTS, Rec, attempt_produce, produce
from .conftest import need_kcat
from .process import ServeProcess
from .tls_certs import client_context, settings

ALICE = ("SCRAM-SHA-512", "alice", "alice-secret")
RULES = "RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/L,DEFAULT"
FAILED = ("Authentication failed during authentication due to invalid credentials with SASL "
          "mechanism SCRAM-SHA-512")


def add_alice(store) -> None:
    mech = scram.MECHANISMS[ALICE[0]]
    store.alter_user_scram_credentials(upsertions=[(ALICE[1], mech.name,
                                                    scram.new_credential(mech, ALICE[2]))])


class Served:
    """`pylog serve` on three listeners: SASL_SSL (SCRAM-SHA-512), MTLS (SSL, client
    certificates required, principals mapped) and EXPIRED (SSL with an expired broker
    certificate). The test's own view goes through pylog's client over SASL_SSL and a
    read-only reader of the log dirs."""

    def __init__(self, data: str, process: ServeProcess, certs) -> None:
        self.data, self.process, self.certs = data, process, certs
        self.listeners = process.listeners

    def admin(self) -> ProtocolClient:
        return ProtocolClient(self.listeners["SASL_SSL"], authenticate=SaslLogin(*ALICE),
                              ssl_context=client_context(self.certs))

    def create_topic(self, topic: str, records: list[bytes] = ()) -> None:
        with self.admin() as client:
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
        with self.admin() as client:
            answer = client.request(9, m.OffsetFetchRequest(group_id=group, topics=[
                m.OffsetFetchRequestOffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 5)
            return answer.topics[0].partitions[0].committed_offset


@pytest.fixture(scope="module")
def served(tmp_path_factory, tls_certs):
    data = str(tmp_path_factory.mktemp("sasl-ssl"))
    with pylog.open(data) as store:
        add_alice(store)
    with ServeProcess(data, "listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,EXPIRED:SSL",
                      "ssl.keystore.type=PEM", f"ssl.keystore.location={tls_certs.server}",
                      "ssl.truststore.type=PEM", f"ssl.truststore.location={tls_certs.ca}",
                      "sasl.enabled.mechanisms=SCRAM-SHA-512",
                      "listener.name.mtls.ssl.client.auth=required",
                      f"listener.name.mtls.ssl.principal.mapping.rules={RULES}",
                      f"listener.name.expired.ssl.keystore.location={tls_certs.expired}",
                      "group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=500",
                      listen="SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0,EXPIRED://127.0.0.1:0") as process:
        yield Served(data, process, tls_certs)
        assert process.alive()
    assert "Traceback" not in process.stderr, process.stderr[-3000:]


def client_settings(client: str, certs, listener: str, password: str = ALICE[2]) -> dict:
    if listener == "SASL_SSL":
        return settings(client, certs, sasl=(ALICE[0], ALICE[1], password))
    return settings(client, certs, mtls=True)


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


# ================================================================ administer, produce, group

def administer(client: str, bootstrap: str, topic: str, extra: dict) -> None:
    """Creates `topic` with the client's own admin API (kcat has none: it lists the
    broker's metadata and the topic is made through pylog's client)."""
    if client == "confluent":
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": bootstrap, **extra})   # alive until answered
        admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    elif client == "kafka-python":
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **extra)
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            admin.close()
    elif client == "aiokafka":
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def create() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **extra)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            finally:
                await admin.close()
        asyncio.run(create())
    else:
        run = subprocess.run([need_kcat(), "-L", "-b", bootstrap, "-J",
                              *[a for k, v in extra.items() for a in ("-X", f"{k}={v}")]],
                             check=True, timeout=60, capture_output=True)
        assert b'"brokers"' in run.stdout


def consume_in_group(client: str, bootstrap: str, topic: str, group: str, count: int,
                     extra: dict) -> list[bytes]:
    """`count` values of `topic` read by a member of `group`, whose offsets are then
    committed (kcat -G commits as it goes)."""
    got: list[bytes] = []
    if client == "kcat":
        run = subprocess.run([need_kcat(), "-G", group, "-b", bootstrap, "-e", "-c", str(count),
                              "-X", "auto.offset.reset=earliest",
                              *[a for k, v in extra.items() for a in ("-X", f"{k}={v}")], topic],
                             check=True, timeout=60, capture_output=True)
        return run.stdout.split()
    if client == "confluent":
        from confluent_kafka import Consumer
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(got) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got
    if client == "kafka-python":
        from kafka import KafkaConsumer
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False, **extra)
        try:
            deadline = time.monotonic() + 30
            while len(got) < count and time.monotonic() < deadline:
                for records in consumer.poll(500).values():
                    got += [r.value for r in records]
            consumer.commit()
        finally:
            consumer.close()
        return got
    from aiokafka import AIOKafkaConsumer

    async def run() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, **extra)
        await consumer.start()
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == count:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
    asyncio.run(run())
    return got


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("listener", ["SASL_SSL", "MTLS"])
def test_each_client_administers_produces_and_consumes_in_a_group(served, tls_certs, client, listener):
    bootstrap = served.listeners[listener]
    extra = client_settings(client, tls_certs, listener)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    administer(client, bootstrap, topic, extra)
    if client == "kcat":
        served.create_topic(topic)
    sent = values(40, f"{client}-{listener}")
    produce(client, bootstrap, topic, [Rec(None, v) for v in sent], codec="lz4", **extra)
    assert served.stored(topic) == sent
    assert consume_in_group(client, bootstrap, topic, group, len(sent), extra) == sent
    if client != "kcat":                 # kcat commits on its own schedule
        assert served.committed(group, topic) == len(sent)


# ================================================================ refused

@pytest.mark.parametrize("client", ["kcat", "confluent", "aiokafka"])
def test_a_wrong_password_over_sasl_ssl_gets_kafkas_error_and_no_data(served, tls_certs, client, caplog):
    """Kafka's SASL_AUTHENTICATION_FAILED, with its message, through the TLS session:
    kcat and confluent-kafka report it, aiokafka logs it; nothing is stored. (kafka-python
    gets the same answer: test_sasl_clients.py, over SASL_PLAINTEXT.)"""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    served.create_topic(topic, [b"private"])
    extra = client_settings(client, tls_certs, "SASL_SSL", password="wrong")
    with caplog.at_level(logging.ERROR, "aiokafka"):
        said = attempt_produce(client, served.listeners["SASL_SSL"], topic, **extra)
    said += " ".join(r.getMessage() for r in caplog.records)
    assert FAILED in said, said
    assert served.stored(topic) == [b"private"]


def test_pylogs_client_with_a_wrong_password_gets_sasl_authentication_failed(served, tls_certs):
    with pytest.raises(ProtocolError, match="SASL_AUTHENTICATION_FAILED"):
        ProtocolClient(served.listeners["SASL_SSL"], authenticate=SaslLogin(ALICE[0], ALICE[1], "x"),
                       ssl_context=client_context(tls_certs))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", ["no client certificate", "untrusted client certificate",
                                  "untrusted broker certificate", "expired broker certificate"])
def test_untrusted_and_expired_certificates_fail_the_handshake(served, tls_certs, client, case):
    """On MTLS, a client without a certificate or with one from an unknown CA; on
    SASL_SSL, a client that does not trust the broker's CA; on EXPIRED, a broker
    certificate past its notAfter: every client fails (Kafka's SSL handshake failed,
    certificate verify failed) and nothing is stored."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    served.create_topic(topic)
    listener, extra = {
        "no client certificate": ("MTLS", settings(client, tls_certs)),
        "untrusted client certificate": ("MTLS", settings(client, tls_certs, cert=tls_certs.rogue_client_cert,
                                                          key=tls_certs.rogue_client_key)),
        "untrusted broker certificate": ("SASL_SSL", settings(client, tls_certs, ca=tls_certs.rogue_ca,
                                                              sasl=ALICE)),
        "expired broker certificate": ("EXPIRED", settings(client, tls_certs)),
    }[case]
    import gc
    import warnings
    with warnings.catch_warnings():
        # kafka-python leaves the SSLSocket of a failed handshake unclosed (its bug).
        warnings.simplefilter("ignore", ResourceWarning)
        said = attempt_produce(client, served.listeners[listener], topic, **extra)
        gc.collect()
    assert said, f"{client} produced through a refused handshake ({case})"
    if client in ("kcat", "confluent"):      # the client's check, or the broker's alert
        assert any(why in said for why in ("SSL handshake failed", "certificate verify failed",
                                           "alert unknown ca", "alert certificate required")), said
    assert served.stored(topic) == []


# ================================================================ principals, pylog's tools

def test_principals_are_sasls_on_sasl_ssl_and_the_certificates_on_ssl(tmp_path, tls_certs):
    """conn.principal (what the authorizer sees): User:alice after SCRAM over SASL_SSL,
    even with a client certificate presented; the mapped certificate name on an SSL
    listener requiring one; None on SASL_SSL before SASL completes."""
    with pylog.open(tmp_path) as store:
        add_alice(store)
        with pylog.Broker(store, config={
                "listeners": "SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
                "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SSL",
                "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.server),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_certs.ca),
                "ssl.client.auth": "requested", "listener.name.mtls.ssl.client.auth": "required",
                "listener.name.mtls.ssl.principal.mapping.rules": RULES,
                "sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as broker:
            mutual = client_context(tls_certs, tls_certs.client_cert, tls_certs.client_key)

            def principals(name: str) -> set:
                with broker._lock:
                    return {c.principal for c in broker._connections if c.listener.name == name}

            with ProtocolClient(broker.bootstrap("SASL_SSL"), ssl_context=mutual,
                                authenticate=SaslLogin(*ALICE)) as client:
                assert client.metadata().brokers
                assert principals("SASL_SSL") == {"User:alice"}
            with ProtocolClient(broker.bootstrap("MTLS"), ssl_context=mutual) as client:
                assert client.metadata().brokers
                assert principals("MTLS") == {"User:alice@payments"}
            served = broker.stats["requests.Metadata"]
            with ProtocolClient(broker.bootstrap("SASL_SSL"), ssl_context=mutual) as client:
                assert principals("SASL_SSL") == {None}      # ApiVersions only, so far
                with pytest.raises((ConnectionError, ProtocolError, OSError)):
                    client.metadata()                       # before SASL: closed, unanswered
            assert broker.stats["requests.Metadata"] == served


def test_pylog_users_over_sasl_ssl_with_kafkas_client_keys(served, tls_certs, tmp_path, capsys):
    """`pylog users --bootstrap-server --command-config` with Kafka's client keys
    (security.protocol=SASL_SSL, ssl.truststore.*, sasl.*): adds a SCRAM user who then
    logs in; a trust store that is not PEM is refused naming the key."""
    from pylog.cli import main
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\nssl.truststore.type=PEM\n"
                      f"ssl.truststore.location={tls_certs.ca}\nsasl.mechanism=SCRAM-SHA-512\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                      f'required username="{ALICE[1]}" password="{ALICE[2]}";\n')
    boot = served.listeners["SASL_SSL"]
    assert main(["users", "--bootstrap-server", boot, "--command-config", str(config), "--alter",
                 "--entity-name", "carol", "--add-config", "SCRAM-SHA-512=[password=carol-secret]"]) == 0
    with ProtocolClient(boot, authenticate=SaslLogin("SCRAM-SHA-512", "carol", "carol-secret"),
                        ssl_context=client_context(tls_certs)) as client:
        assert client.metadata().brokers
    config.write_text(config.read_text().replace("ssl.truststore.type=PEM", "ssl.truststore.type=JKS"))
    assert main(["users", "--bootstrap-server", boot, "--command-config", str(config), "--describe"]) != 0
    assert "ssl.truststore.type = JKS: pylog's tools read PEM stores only" in capsys.readouterr().err
