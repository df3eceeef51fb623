"""Users' SCRAM credentials in the store: Kafka's formulas (RFC 5802/7677 vectors), the
controller's rules for a change (per user, all or nothing, Kafka's errors), and the file
in every log dir (0600, newest epoch wins, corrupt copies ignored, never the password)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

import pylog
from pylog.common import scram
from pylog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

SHA256, SHA512 = scram.MECHANISMS["SCRAM-SHA-256"], scram.MECHANISMS["SCRAM-SHA-512"]


def test_the_formulas_give_rfc_7677s_scram_sha_256_example():
    """RFC 7677 section 3: user "user", password "pencil"."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password(SHA256, "pencil", salt, 4096)
    credential = scram.credential_from_salted(SHA256, salt, salted, 4096)
    auth = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    proof = scram.client_proof(SHA256, salted, auth)
    assert base64.b64encode(proof) == b"dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    signature = scram.client_signature(SHA256, credential.stored_key, auth)
    assert scram.stored_key_from_proof(SHA256, signature, proof) == credential.stored_key
    assert base64.b64encode(scram.server_signature(SHA256, credential.server_key, auth)) == \
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_the_broker_side_exchange_gives_rfc_7677s_messages(monkeypatch):
    """The SCRAM server, fed RFC 7677's client messages with its nonce pinned, answers
    RFC 7677's server messages byte for byte."""
    from pylog.broker import sasl_mechanisms
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.credential_from_salted(SHA256, salt, scram.salted_password(SHA256, "pencil", salt, 4096), 4096)
    monkeypatch.setattr(sasl_mechanisms.secrets, "token_urlsafe", lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server = sasl_mechanisms.ScramServer(SHA256, lambda user, mech: credential if user == "user" else None)
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == \
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == \
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert (server.complete, server.authorization_id) == (True, "user")


def test_sasl_names_escape_commas_and_equals_as_kafka():
    assert scram.sasl_name("a=b,c") == "a=3Db=2Cc"
    assert scram.username_from_sasl_name("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ValueError, match="invalid SCRAM username"):
        scram.username_from_sasl_name("a=4Fb")


def test_credentials_are_kept_in_every_dir_private_and_without_the_password(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pylog.open(dirs) as store:
        outcome = store.alter_user_scram_credentials(upsertions=[
            ("alice", "SCRAM-SHA-512", scram.new_credential(SHA512, "alice-secret")),
            ("alice2", 1, scram.new_credential(SHA256, "alice2-secret", 8192))])
        assert outcome == {"alice": None, "alice2": None}
    for d in dirs:
        path = os.path.join(d, "pylog-scram-credentials.json")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        text = Path(path).read_text(encoding="utf-8")
        assert "secret" not in text
        body = json.loads(text)
        assert body["epoch"] == 1 and set(body["users"]) == {"alice", "alice2"}
        assert body["users"]["alice2"]["SCRAM-SHA-256"]["iterations"] == 8192
    with pylog.open(dirs) as store:
        assert store.describe_user_scram_credentials() == {"alice": {"SCRAM-SHA-512": 4096},
                                                           "alice2": {"SCRAM-SHA-256": 8192}}
        c = store.scram_credential("alice", "SCRAM-SHA-512")
        assert "hidden" in repr(c) and "secret" not in repr(c)


def test_the_newest_copy_wins_and_stale_or_corrupt_copies_are_rewritten(tmp_path, caplog):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")]
    with pylog.open(dirs) as store:
        store.alter_user_scram_credentials(upsertions=[("old", 2, scram.new_credential(SHA512, "x"))])
    stale = (Path(dirs[0]) / "pylog-scram-credentials.json").read_bytes()
    with pylog.open(dirs) as store:
        store.alter_user_scram_credentials(upsertions=[("new", 2, scram.new_credential(SHA512, "y"))])
    with open(os.path.join(dirs[0], "pylog-scram-credentials.json"), "wb") as f:
        f.write(stale)                                         # epoch 1
    with open(os.path.join(dirs[1], "pylog-scram-credentials.json"), "wb") as f:
        f.write(b"{not json")
    with pylog.open(dirs) as store:
        assert set(store.describe_user_scram_credentials()) == {"old", "new"}
    assert any("ignoring a corrupt SCRAM credentials file" in r.getMessage() for r in caplog.records)
    copies = {(Path(d) / "pylog-scram-credentials.json").read_bytes() for d in dirs}
    assert len(copies) == 1 and json.loads(copies.pop())["epoch"] == 2


def test_a_change_follows_kafkas_controller_rules(tmp_path):
    with pylog.open(tmp_path) as store:
        store.alter_user_scram_credentials(upsertions=[("bob", 2, scram.new_credential(SHA512, "b"))])
        few = scram.ScramCredential(b"s", b"k" * 64, b"k" * 64, 4095)
        many = scram.ScramCredential(b"s", b"k" * 64, b"k" * 64, 16385)
        ok = scram.new_credential(SHA512, "z")
        outcome = store.alter_user_scram_credentials(
            deletions=[("ghost", 2), ("bob", 1), ("twice", 2)],
            upsertions=[("few", 2, few), ("many", 2, many), ("", 2, ok), ("what", 9, ok),
                        ("twice", 2, ok), ("zed", "SCRAM-SHA-512", ok)])
        kinds = {u: type(e).__name__ if e else None for u, e in outcome.items()}
        assert kinds == {"ghost": "ResourceNotFoundError", "bob": "ResourceNotFoundError",
                         "twice": "DuplicateResourceError", "few": "UnacceptableCredentialError",
                         "many": "UnacceptableCredentialError", "": "UnacceptableCredentialError",
                         "what": "UnsupportedSaslMechanismError", "zed": None}
        assert isinstance(outcome["what"], UnsupportedSaslMechanismError)
        assert [e.code for e in (outcome["ghost"], outcome["twice"], outcome["few"], outcome["what"])] == \
            [91, 92, 93, 33]
        assert set(store.describe_user_scram_credentials()) == {"bob", "zed"}
        # Deleting a user's last credential removes the user.
        assert store.alter_user_scram_credentials(deletions=[("bob", "SCRAM-SHA-512")]) == {"bob": None}
        found = store.describe_user_scram_credentials(["bob", "zed", "zed"])
        assert isinstance(found["bob"], ResourceNotFoundError)
        assert isinstance(found["zed"], DuplicateResourceError)
        assert str(found["bob"]) == "Attempt to describe a user credential that does not exist: bob"
        assert isinstance(outcome["few"], UnacceptableCredentialError)


def test_a_change_that_cannot_be_written_changes_nothing(tmp_path):
    with pylog.open(tmp_path) as store:
        store.alter_user_scram_credentials(upsertions=[("bob", 2, scram.new_credential(SHA512, "b"))])
        store.close()
        with pytest.raises(ValueError, match="closed"):
            store.alter_user_scram_credentials(upsertions=[("eve", 2, scram.new_credential(SHA512, "e"))])
    with pylog.open(tmp_path) as store:
        assert set(store.describe_user_scram_credentials()) == {"bob"}
