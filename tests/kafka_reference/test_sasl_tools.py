"""Kafka's own tools (its Java admin, producer and consumer clients) against `pylog serve`
with a SASL_PLAINTEXT listener: kafka-configs creates a SCRAM-SHA-512 user exactly as on
Kafka (``--alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users``),
which kafka-topics, the console producer and a console consumer in a group then use; a
wrong password fails with Kafka's message (SaslAuthenticationException); the SCRAM user survives
kill -9 of the broker."""

from __future__ import annotations

import pytest

from broker.process import ServeProcess

from .support import run_tool

# long: handed out first on the xdist workers (tests/conftest.py)
pytestmark = pytest.mark.slow

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
