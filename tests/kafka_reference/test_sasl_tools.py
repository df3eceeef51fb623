"""Kafka's own tools (its Java admin, producer and consumer clients) against `pylog serve`
with a SASL_PLAINTEXT listener: kafka-configs creates a SCRAM-SHA-512 user exactly as on
Kafka (``--alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users``),
which kafka-topics, the console producer and a console consumer in a group then use; a
wrong password fails with Kafka's message (SaslAuthenticationException); the SCRAM user survives
kill -9 of the broker. The same over SASL_SSL, with kafka-producer-perf-test, and a
consumer group over mutual TLS."""

from __future__ import annotations

import pytest

from broker.process import ServeProcess
from broker.tls_certs import KEY_PASSWORD, make_certs

from .support import run_tool

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
FAILED = ("Authentication failed during authentication due to invalid credentials with SASL "
          "mechanism SCRAM-SHA-512")


def client_config(path, mechanism: str, user: str, password: str) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                    f"sasl.jaas.config={module} required username=\"{user}\" password=\"{password}\";\n")
    return str(path)


def serve(data: str) -> ServeProcess:
    return ServeProcess(data, "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                        "group.initial.rebalance.delay.ms=0",
                        listen="SASL_PLAINTEXT://127.0.0.1:0")


def test_kafka_tools_over_sasl_scram_and_plain_and_users_survive_kill_9(tmp_path):
    data = str(tmp_path / "data")
    admin = client_config(tmp_path / "admin.properties", "PLAIN", "admin", "admin-secret")
    alice = client_config(tmp_path / "alice.properties", "SCRAM-SHA-512", "alice", "alice-secret")
    wrong = client_config(tmp_path / "wrong.properties", "SCRAM-SHA-512", "alice", "not-it")
    broker = serve(data)
    try:
        b = ["--bootstrap-server", broker.bootstrap]
        out = run_tool("kafka-configs", *b, "--command-config", admin, "--alter", "--add-config",
                       "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
                       "--entity-type", "users", "--entity-name", "alice")
        assert "Completed updating config for user alice." in out.stdout
        run_tool("kafka-topics", *b, "--command-config", alice, "--create", "--topic", "sasl-t",
                 "--partitions", "2")
        lines = [f"line {i}" for i in range(40)]
        run_tool("kafka-console-producer", *b, "--producer.config", alice, "--topic", "sasl-t",
                 input="".join(line + "\n" for line in lines))
        got = run_tool("kafka-console-consumer", *b, "--consumer.config", alice, "--topic", "sasl-t",
                       "--group", "sasl-g", "--from-beginning", "--max-messages", "40",
                       "--timeout-ms", "60000")
        assert sorted(got.stdout.splitlines()) == sorted(lines)
        failed = run_tool("kafka-topics", *b, "--command-config", wrong, "--list", check=False, timeout=180)
        assert failed.returncode != 0
        assert f"Error while executing topic command : {FAILED}" in failed.stdout
        assert "sasl-t" not in failed.stdout
        broker.kill()                                              # kill -9
    finally:
        broker.stop()
    broker = serve(data)
    try:
        listed = run_tool("kafka-topics", "--bootstrap-server", broker.bootstrap, "--command-config",
                          alice, "--list")
        assert "sasl-t" in listed.stdout.split()
    finally:
        broker.stop()


def tls_client_config(path, certs, mechanism: str | None = None, user: str = "", password: str = "") -> str:
    """A Java client's properties over TLS with PEM stores: SASL_SSL with `mechanism`,
    else SSL presenting the client's certificate (its key encrypted, as Kafka wants a
    PEM key file)."""
    lines = ["ssl.truststore.type=PEM", f"ssl.truststore.location={certs.ca}"]
    if mechanism:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        lines += ["security.protocol=SASL_SSL", f"sasl.mechanism={mechanism}",
                  f"sasl.jaas.config={module} required username=\"{user}\" password=\"{password}\";"]
    else:
        lines += ["security.protocol=SSL", "ssl.keystore.type=PEM",
                  f"ssl.keystore.location={certs.client_encrypted}", f"ssl.key.password={KEY_PASSWORD}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_kafka_tools_over_sasl_ssl_scram_and_mutual_tls(tmp_path):
    """`pylog serve` with a SASL_SSL listener (SCRAM-SHA-512, PLAIN for the admin) and an
    mTLS one: kafka-configs adds the SCRAM user over SASL_SSL, kafka-topics creates a
    topic as that user, kafka-producer-perf-test writes 5,000 records over SASL_SSL, a
    console consumer in a group reads them over mTLS and kafka-consumer-groups describes
    the group; a wrong password gets Kafka's message through TLS."""
    certs = make_certs(tmp_path / "certs")
    data = str(tmp_path / "data")
    admin = tls_client_config(tmp_path / "admin.properties", certs, "PLAIN", "admin", "admin-secret")
    alice = tls_client_config(tmp_path / "alice.properties", certs, "SCRAM-SHA-512", "alice", "alice-secret")
    wrong = tls_client_config(tmp_path / "wrong.properties", certs, "SCRAM-SHA-512", "alice", "not-it")
    mtls = tls_client_config(tmp_path / "mtls.properties", certs)
    with ServeProcess(data, "listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL",
                      "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.server}",
                      "ssl.truststore.type=PEM", f"ssl.truststore.location={certs.ca}",
                      "listener.name.mtls.ssl.client.auth=required",
                      "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                      f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
                      "group.initial.rebalance.delay.ms=0",
                      listen="SASL_SSL://127.0.0.1:0,MTLS://127.0.0.1:0") as broker:
        sasl_ssl = ["--bootstrap-server", broker.listeners["SASL_SSL"]]
        out = run_tool("kafka-configs", *sasl_ssl, "--command-config", admin, "--alter", "--add-config",
                       "SCRAM-SHA-512=[password=alice-secret]", "--entity-type", "users",
                       "--entity-name", "alice")
        assert "Completed updating config for user alice." in out.stdout
        run_tool("kafka-topics", *sasl_ssl, "--command-config", alice, "--create", "--topic", "tls-t",
                 "--partitions", "2")
        perf = run_tool("kafka-producer-perf-test", "--topic", "tls-t", "--num-records", "5000",
                        "--record-size", "100", "--throughput", "-1", "--producer.config", alice,
                        "--producer-props", f"bootstrap.servers={broker.listeners['SASL_SSL']}",
                        "acks=all").stdout
        assert "5000 records sent" in perf
        mutual = ["--bootstrap-server", broker.listeners["MTLS"]]
        got = run_tool("kafka-console-consumer", *mutual, "--consumer.config", mtls, "--topic", "tls-t",
                       "--group", "tls-g", "--from-beginning", "--max-messages", "5000",
                       "--timeout-ms", "60000")
        assert len(got.stdout.splitlines()) == 5000
        described = run_tool("kafka-consumer-groups", *mutual, "--command-config", mtls, "--describe",
                             "--group", "tls-g").stdout
        assert "tls-t" in described
        failed = run_tool("kafka-topics", *sasl_ssl, "--command-config", wrong, "--list", check=False,
                          timeout=180)
        assert failed.returncode != 0
        assert f"Error while executing topic command : {FAILED}" in failed.stdout
