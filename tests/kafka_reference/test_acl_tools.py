"""Kafka's own tools against `pylog serve` with ACLs (authorizer.class.name = Kafka's
StandardAuthorizer) on a SASL_PLAINTEXT listener: kafka-acls adds, lists and removes
ACLs (literal and prefixed) as on Kafka; the Java console consumer and producer of a
principal without ACLs fail with Kafka's authorization errors and get no data, and work
once kafka-acls allows them; kafka-configs sets and describes client quotas
(--entity-type clients / users, --entity-default)."""

from __future__ import annotations

import subprocess

import pytest

from broker.process import ServeProcess

from .support import java_command, run_tool

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def client_config(path, user: str) -> str:
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                    f"required username=\"{user}\" password=\"{USERS[user]}\";\n")
    return str(path)


def run_logging_errors(tmp_path, tool: str, *args: str, input: str | None = None):
    """A tool run with its ERROR log lines on stderr (run_tool silences log4j): the Java
    clients report an authorization failure only there, as on Kafka."""
    props = tmp_path / "log4j-errors.properties"
    props.write_text("log4j.rootLogger=ERROR, stderr\n"
                     "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.stderr.Target=System.err\n"
                     "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.stderr.layout.ConversionPattern=%p %m%n\n")
    cmd = [f"-Dlog4j.configuration=file:{props}" if a.startswith("-Dlog4j.configuration=") else a
           for a in java_command(tool, *args)]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("acl-tools")
    process = ServeProcess(str(tmp / "data"), "sasl.enabled.mechanisms=PLAIN",
                           f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
                           "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users=User:admin", "group.initial.rebalance.delay.ms=0",
                           listen="SASL_PLAINTEXT://127.0.0.1:0")
    yield process, client_config(tmp / "admin.properties", "admin"), client_config(tmp / "alice.properties", "alice")
    process.stop()


def test_kafka_acls_add_list_remove_and_java_clients_denied_then_allowed(served, tmp_path):
    broker, admin, alice = served
    b = ["--bootstrap-server", broker.bootstrap]
    run_tool("kafka-topics", *b, "--command-config", admin, "--create", "--topic", "acl-t",
             "--partitions", "1")
    lines = [f"secret {i}" for i in range(10)]
    run_tool("kafka-console-producer", *b, "--producer.config", admin, "--topic", "acl-t",
             input="".join(line + "\n" for line in lines))
    # alice has no ACL: Kafka's errors, no records.
    denied = run_logging_errors(tmp_path, "kafka-console-consumer", *b, "--consumer.config", alice,
                                "--topic", "acl-t", "--group", "acl-g", "--from-beginning",
                                "--max-messages", "10", "--timeout-ms", "20000")
    assert "secret" not in denied.stdout and "Processed a total of 0 messages" in denied.stderr
    assert ("Not authorized to access group: acl-g" in denied.stderr
            or "Not authorized to access topics: [acl-t]" in denied.stderr), denied.stderr[-2000:]
    wrote = run_logging_errors(tmp_path, "kafka-console-producer", *b, "--producer.config", alice,
                               "--topic", "acl-t", input="intruder\n")
    assert "Not authorized to access topics: [acl-t]" in wrote.stderr, wrote.stderr[-2000:]
    # kafka-acls: a literal READ on the topic, a prefixed READ on groups.
    out = run_tool("kafka-acls", *b, "--command-config", admin, "--add", "--allow-principal",
                   "User:alice", "--operation", "Read", "--topic", "acl-t")
    assert "ResourcePattern(resourceType=TOPIC, name=acl-t, patternType=LITERAL)" in out.stdout
    out = run_tool("kafka-acls", *b, "--command-config", admin, "--add", "--allow-principal",
                   "User:alice", "--operation", "Read", "--group", "acl-", "--resource-pattern-type",
                   "prefixed")
    assert "ResourcePattern(resourceType=GROUP, name=acl-, patternType=PREFIXED)" in out.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out.stdout
    got = run_tool("kafka-console-consumer", *b, "--consumer.config", alice, "--topic", "acl-t",
                   "--group", "acl-g", "--from-beginning", "--max-messages", "10", "--timeout-ms", "60000")
    assert sorted(got.stdout.splitlines()) == sorted(lines)
    # Remove: the topic ACL goes, the group's stays.
    run_tool("kafka-acls", *b, "--command-config", admin, "--remove", "--allow-principal", "User:alice",
             "--operation", "Read", "--topic", "acl-t", "--force")
    listed = run_tool("kafka-acls", *b, "--command-config", admin, "--list")
    assert "name=acl-t," not in listed.stdout and "name=acl-," in listed.stdout


def test_kafka_configs_sets_and_describes_client_quotas(served):
    broker, admin, _ = served
    b = ["--bootstrap-server", broker.bootstrap, "--command-config", admin]
    out = run_tool("kafka-configs", *b, "--alter", "--add-config",
                   "producer_byte_rate=1048576,consumer_byte_rate=2097152",
                   "--entity-type", "clients", "--entity-name", "app-1")
    assert "Completed updating config for client app-1." in out.stdout
    run_tool("kafka-configs", *b, "--alter", "--add-config", "request_percentage=200",
             "--entity-type", "users", "--entity-default")
    described = run_tool("kafka-configs", *b, "--describe", "--entity-type", "clients",
                         "--entity-name", "app-1")    # (each tool run costs a JVM start: ~10 s)
    assert "Quota configs for client-id 'app-1' are" in described.stdout
    assert "producer_byte_rate=1048576.0" in described.stdout
    assert "consumer_byte_rate=2097152.0" in described.stdout
    bad = run_tool("kafka-configs", *b, "--alter", "--add-config", "producer_byte_rate=1.5",
                   "--entity-type", "clients", "--entity-name", "app-1", check=False)
    assert bad.returncode != 0 and "whole number" in bad.stdout + bad.stderr
