"""``pylog users``: SCRAM users in log dirs and at a SASL broker (--bootstrap-server with
Kafka's --command-config), kafka-configs' syntax and lines; the users it makes log in
with a real client, and no password reaches the disk."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pylog
from pylog.common import scram

from .test_cli import SCRIPT, run

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')


def run_input(*args: str, input: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [SCRIPT] if os.path.exists(SCRIPT) else [sys.executable, "-m", "pylog.cli"]
    out = subprocess.run([*command, *args], input=input, capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def logs_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    from pylog.protocol.client import ProtocolClient, ProtocolError
    from pylog.remote.sasl import SaslLogin
    try:
        with ProtocolClient(bootstrap, authenticate=SaslLogin(mechanism, user, password)) as client:
            return bool(client.metadata().brokers)
    except ProtocolError:
        return False


def sasl_broker(store):
    return pylog.Broker(store, listen="SASL_PLAINTEXT://127.0.0.1:0", config={
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": 0})


def test_users_in_log_dirs_add_describe_delete(tmp_path):
    d = str(tmp_path)
    out = run("users", "--log-dirs", d, "--alter", "--entity-name", "alice",
              "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-256],SCRAM-SHA-512=[password=alice-512]")
    assert out.stdout.strip() == "Completed updating config for user alice."
    # No password on the command line: asked for (here on stdin), twice, not echoed.
    run_input("users", "--log-dirs", d, "--alter", "--entity-name", "bob", "--add-config",
              "SCRAM-SHA-512=[iterations=4096]", input="bob-secret\nbob-secret\n")
    out = run("users", "--log-dirs", d, "--describe")
    assert out.stdout.splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096",
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096"]
    run("users", "--log-dirs", d, "--alter", "--entity-name", "alice", "--delete-config", "SCRAM-SHA-256")
    out = run("users", "--log-dirs", d, "--describe", "--entity-name", "alice")
    assert out.stdout.strip() == "SCRAM credential configs for user-principal 'alice' are " \
                                 "SCRAM-SHA-512=iterations=4096"
    text = (tmp_path / "pylog-scram-credentials.json").read_text()
    assert "alice-512" not in text and "bob-secret" not in text
    with pylog.open(d) as store, sasl_broker(store).start() as broker:
        assert logs_in(broker.bootstrap_servers, "SCRAM-SHA-512", "alice", "alice-512")
        assert logs_in(broker.bootstrap_servers, "SCRAM-SHA-512", "bob", "bob-secret")
        assert not logs_in(broker.bootstrap_servers, "SCRAM-SHA-256", "alice", "alice-256")   # deleted
        # The store is in use: the log-dir form says so and changes nothing.
        out = run("users", "--log-dirs", d, "--alter", "--entity-name", "eve",
                  "--add-config", "SCRAM-SHA-512=[password=x]", check=False)
        assert out.returncode != 0 and "lock" in out.stderr.lower()
        assert "eve" not in store.describe_user_scram_credentials()


@pytest.mark.parametrize("args,message", [
    (["--add-config", "SCRAM-SHA-512=[iterations=100,password=x]"],
     "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-512"),
    (["--add-config", "SCRAM-SHA-1=[password=x]"], "expected SCRAM-SHA-256=[password=...]"),
    (["--delete-config", "PLAIN"], "'PLAIN' is not a SCRAM mechanism"),
    ([], "--alter needs --add-config or --delete-config"),
])
def test_bad_arguments_are_refused_with_the_reason(tmp_path, args, message, capsys):
    from pylog.cli import main
    assert main(["users", "--log-dirs", str(tmp_path), "--alter", "--entity-name", "alice", *args]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "pylog-scram-credentials.json").exists()


def test_users_at_a_sasl_broker_with_a_command_config(tmp_path):
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                     "required username=\"admin\" password=\"admin-secret\";\n")
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(admin.read_text().replace("admin-secret", "nope"))
    with pylog.open(tmp_path / "data") as store, sasl_broker(store).start() as broker:
        b = ["--bootstrap-server", broker.bootstrap_servers, "--command-config", str(admin)]
        run("users", *b, "--alter", "--entity-name", "carol",
            "--add-config", "SCRAM-SHA-512=[password=carol-secret]")
        assert logs_in(broker.bootstrap_servers, "SCRAM-SHA-512", "carol", "carol-secret")
        out = run("users", *b, "--describe", "--entity-name", "carol")
        assert "SCRAM-SHA-512=iterations=4096" in out.stdout
        out = run("users", *b, "--describe", "--entity-name", "nobody")
        assert "Attempt to describe a user credential that does not exist: nobody" in out.stdout
        out = run("users", *b, "--alter", "--entity-name", "carol", "--delete-config", "SCRAM-SHA-256",
                  check=False)
        assert out.returncode != 0 and "Attempt to delete a user credential that does not exist" in out.stderr
        out = run("users", "--bootstrap-server", broker.bootstrap_servers, "--command-config", str(wrong),
                  "--describe", check=False)
        assert out.returncode != 0
        assert "Authentication failed: Invalid username or password" in out.stderr
        assert "SASL_AUTHENTICATION_FAILED" in out.stderr
        assert store.scram_credential("carol", "SCRAM-SHA-512") == \
            scram.credential_from_salted(scram.MECHANISMS["SCRAM-SHA-512"],
                                         store.scram_credential("carol", "SCRAM-SHA-512").salt,
                                         scram.salted_password(scram.MECHANISMS["SCRAM-SHA-512"], "carol-secret",
                                                               store.scram_credential("carol", "SCRAM-SHA-512").salt,
                                                               4096), 4096)
