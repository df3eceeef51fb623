"""pylog's own remote clients (RemoteTopics, RemotePartition, RemoteProducer, RemoteGroups:
what the Spark source and sink and the CLI use in remote mode) over SASL_SSL and mutual
TLS, as Kafka's client keys say (ClientSecurity); a ClientSecurity survives pickling (Spark
ships it to its executors) and a wrong key is an error naming it before any connection."""

from __future__ import annotations

import pickle

import pytest

import pylog
from pylog.common import scram
from pylog.errors import ConfigError
from pylog.protocol.client import ProtocolError
from pylog.remote import ClientSecurity, RemoteGroups, RemoteProducer, RemoteTopics, leaders

SASL_AUTHENTICATION_FAILED = 58
RULES = "RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/L,DEFAULT"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls_certs):
    store = pylog.open(str(tmp_path_factory.mktemp("remote-security")))
    mech = scram.MECHANISMS["SCRAM-SHA-256"]
    store.alter_user_scram_credentials(upsertions=[("alice", mech.name,
                                                    scram.new_credential(mech, "alice-secret"))])
    store.create_topic("events", 2)
    broker = pylog.Broker(store, listen="SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0", config={
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_certs.ca),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.mtls.ssl.client.auth": "required",
        "connection.failed.authentication.delay.ms": 0}).start()
    try:
        yield broker
    finally:
        broker.shutdown()
        store.close()


def scram_keys(certs, password: str = "alice-secret") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.truststore.location": str(certs.ca),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                f'required username="alice" password="{password}";'}


def test_produce_and_read_back_over_sasl_ssl_with_a_pickled_security(broker, tls_certs):
    security = pickle.loads(pickle.dumps(ClientSecurity(scram_keys(tls_certs))))
    bootstrap = broker.bootstrap("SASL_SSL")
    counts, where = leaders(bootstrap, ["events"], "test", security)
    assert counts == {"events": 2}
    with RemoteProducer(where, "test", security=security) as producer:
        producer.send("events", 1, pylog.records.encode_batch([b"a", b"b", b"c"]), 3)
    with RemoteTopics(bootstrap, "test", security) as topics:
        part = topics.partition("events", 1)
        assert part.log_end_offset() == 3
        values = [v for t in part.read_arrow(0, 3) for v in t.column("value").to_pylist()]
    assert values == [b"a", b"b", b"c"]
    with RemoteGroups(bootstrap, "test", security) as groups:
        assert groups.describe("nobody").state in ("Dead", "Empty")


def test_mutual_tls(broker, tls_certs):
    security = ClientSecurity({"security.protocol": "SSL", "ssl.truststore.location": str(tls_certs.ca),
                               "ssl.keystore.location": str(tls_certs.client)})
    with RemoteTopics(broker.bootstrap("MTLS"), "test", security) as topics:
        assert topics.topics()["events"] == 2


def test_a_wrong_password_is_kafkas_error(broker, tls_certs):
    security = ClientSecurity(scram_keys(tls_certs, "wrong"))
    with pytest.raises(ProtocolError) as failed:
        RemoteTopics(broker.bootstrap("SASL_SSL"), "test", security)
    assert failed.value.code == SASL_AUTHENTICATION_FAILED


def test_plaintext_at_a_tls_listener_gets_no_answer(broker):
    with pytest.raises((ProtocolError, OSError, EOFError)):
        RemoteTopics(broker.bootstrap("SASL_SSL"), "test")


@pytest.mark.parametrize("keys, named", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}, "sasl.jaas.config"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"},
     "ssl.truststore.location"),
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
      "sasl.jaas.config": "x required;"}, "sasl.mechanism"),
    ({"ssl.truststore.type": "JKS", "security.protocol": "SSL"}, "ssl.truststore.type"),
    ({"sasl.password": "x"}, "sasl.password"),
])
def test_a_key_that_cannot_work_is_named(keys, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        ClientSecurity(keys)
