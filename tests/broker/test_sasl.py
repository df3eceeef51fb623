"""SASL on a SASL_PLAINTEXT listener, request by request: Kafka's authenticator state
machine (ApiVersions, SaslHandshake, SaslAuthenticate; KIP-43 raw tokens after a v0
handshake), PLAIN and SCRAM, Kafka's errors and messages, what an unauthenticated
connection may send (and how much, for how long), KIP-368 session lifetimes and
re-authentication, Describe/AlterUserScramCredentials, and the configs that cannot work.
Raw frames over real sockets against an in-process pylog.Broker; the clients' side is in
test_sasl_clients.py."""

from __future__ import annotations

import base64
import logging
import re
import socket
import struct
import time
from pathlib import Path

import pytest

import pylog
from pylog.common import scram
from pylog.errors import ConfigError
from pylog.protocol import decode_response, encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient, ProtocolError
from pylog.remote.sasl import SaslLogin

UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION = 33, 34, 35
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_bob="bob-secret";')
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with " \
               "SASL mechanism {}"
RECORDS = [b"secret-%d" % i for i in range(20)]


def sasl_broker(store, **config):
    values = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
              "connection.failed.authentication.delay.ms": 0}
    values.update(config)
    return pylog.Broker(store, listen="SASL_PLAINTEXT://127.0.0.1:0", config=values).start()


def add_user(store, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    mech = scram.MECHANISMS[mechanism]
    assert store.alter_user_scram_credentials(
        upsertions=[(user, mechanism, scram.new_credential(mech, password))]) == {user: None}


class Served:
    def __init__(self, store, broker) -> None:
        self.store, self.broker, self.bootstrap = store, broker, broker.bootstrap_servers


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("sasl")))
    store.create_topic("secret", 1)
    store.log("secret", 0).append_records(RECORDS)
    add_user(store, "alice", "alice-secret")
    add_user(store, "carol", "carol-secret", "SCRAM-SHA-256")
    broker = sasl_broker(store)
    try:
        yield Served(store, broker)
    finally:
        broker.shutdown()
        store.close()


# ================================================================ raw frames

class Raw:
    """One socket, Kafka frames by hand."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.correlation = 0

    def send(self, api_key: int, version: int, body) -> None:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw", body))

    def frame(self) -> bytes:
        size = struct.unpack(">i", self.exactly(4))[0]
        return self.exactly(size)

    def exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def request(self, api_key: int, version: int, body):
        self.send(api_key, version, body)
        correlation, answer = decode_response(api_key, version, self.frame())
        assert correlation == self.correlation
        return answer

    def closed(self, timeout: float = 5) -> bool:
        """The broker closed the connection (and sent nothing more)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1 << 16) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def fetch_request(topic: str = "secret"):
    return m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                          topics=[m.FetchRequestFetchTopic(topic=topic, partitions=[
                              m.FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                           partition_max_bytes=1 << 20)])])


def scram_exchange(raw: Raw, mechanism: str, user: str, password: str, version: int = 2,
                   nonce: bytes = b"clientnonce123"):
    """Client-first and client-final over SaslAuthenticate; returns both answers."""
    mech = scram.MECHANISMS[mechanism]
    bare = b"n=" + user.encode() + b",r=" + nonce
    first = raw.request(36, version, m.SaslAuthenticateRequest(auth_bytes=b"n,," + bare))
    if first.error_code:
        return first, None
    fields = dict(item.split(b"=", 1) for item in bytes(first.auth_bytes).split(b","))
    salted = scram.salted_password(mech, password, base64.b64decode(fields[b"s"]), int(fields[b"i"]))
    without_proof = b"c=biws,r=" + fields[b"r"]
    auth_message = b",".join((bare, bytes(first.auth_bytes), without_proof))
    proof = scram.client_proof(mech, salted, auth_message)
    final = raw.request(36, version, m.SaslAuthenticateRequest(
        auth_bytes=without_proof + b",p=" + base64.b64encode(proof)))
    return first, final


def records_of(answer) -> list[bytes]:
    data = bytes(answer.responses[0].partitions[0].records or b"")
    return pylog.records.decode_arrow(data).column("value").to_pylist() if data else []


# ================================================================ authenticating

@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-512", "alice", "alice-secret"), ("SCRAM-SHA-256", "carol", "carol-secret"),
    ("PLAIN", "bob", "bob-secret")])
def test_each_mechanism_authenticates_and_then_requests_are_served(served, mechanism, user, password):
    with ProtocolClient(served.bootstrap, authenticate=SaslLogin(mechanism, user, password)) as client:
        part = client.fetch("secret", 0, 0)
        assert pylog.records.decode_arrow(bytes(part.records)).column("value").to_pylist() == RECORDS
        # Kafka's principal, on the connection, for the authorizer.
        with served.broker._lock:
            principals = {c.principal for c in served.broker._connections}
        assert f"User:{user}" in principals


def test_the_scram_exchange_checks_the_servers_signature(served):
    """The server-final message carries HMAC(ServerKey, AuthMessage): the client's check
    passes only against the credential salted from the same password."""
    raw = Raw(served.bootstrap)
    try:
        assert raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        first, final = scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret")
        assert final.error_code == 0 and bytes(final.auth_bytes).startswith(b"v=")
        assert final.session_lifetime_ms == 0          # connections.max.reauth.ms unset
        assert raw.request(1, 12, fetch_request()).responses[0].partitions[0].error_code == 0
    finally:
        raw.close()


@pytest.mark.parametrize("mechanism,user,password,message", [
    ("SCRAM-SHA-512", "alice", "wrong", SCRAM_FAILED.format("SCRAM-SHA-512")),
    ("SCRAM-SHA-512", "nobody", "x", SCRAM_FAILED.format("SCRAM-SHA-512")),
    ("SCRAM-SHA-256", "alice", "alice-secret", SCRAM_FAILED.format("SCRAM-SHA-256")),  # no 256 credential
    ("PLAIN", "bob", "wrong", "Authentication failed: Invalid username or password"),
    ("PLAIN", "nobody", "x", "Authentication failed: Invalid username or password")])
def test_a_wrong_password_gets_kafkas_error_then_the_connection_closes(served, mechanism, user, password,
                                                                         message):
    """SASL_AUTHENTICATION_FAILED (58) with Kafka's message, then the broker closes the
    connection: no request after it is answered. A user that does not exist fails the
    same way, at the same step, as a wrong password (nothing tells which users exist)."""
    raw = Raw(served.bootstrap)
    try:
        assert raw.request(17, 1, m.SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        if mechanism == "PLAIN":
            answer = raw.request(36, 2, m.SaslAuthenticateRequest(
                auth_bytes=b"\0" + user.encode() + b"\0" + password.encode()))
        else:
            first, answer = scram_exchange(raw, mechanism, user, password)
            assert first.error_code == 0                 # fails at the proof, never before
        assert (answer.error_code, answer.error_message) == (SASL_AUTHENTICATION_FAILED, message)
        raw.send(1, 12, fetch_request())
        assert raw.closed()
    finally:
        raw.close()


def test_a_tool_gets_the_error_by_name(served):
    with pytest.raises(ProtocolError, match="SASL_AUTHENTICATION_FAILED") as raised:
        ProtocolClient(served.bootstrap, authenticate=SaslLogin("SCRAM-SHA-512", "alice", "nope"))
    assert raised.value.code == SASL_AUTHENTICATION_FAILED


def test_the_failure_answer_waits_connection_failed_authentication_delay_ms(tmp_path):
    with pylog.open(tmp_path) as store:
        add_user(store, "alice", "alice-secret")
        broker = sasl_broker(store, **{"connection.failed.authentication.delay.ms": 600})
        try:
            raw = Raw(broker.bootstrap_servers)
            raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
            start = time.monotonic()
            answer = raw.request(36, 1, m.SaslAuthenticateRequest(auth_bytes=b"\0bob\0bad"))
            assert answer.error_code == SASL_AUTHENTICATION_FAILED
            assert time.monotonic() - start >= 0.55
            raw.close()
        finally:
            broker.shutdown()


def test_an_unknown_mechanism_gets_unsupported_sasl_mechanism_with_the_enabled_ones(served):
    raw = Raw(served.bootstrap)
    try:
        answer = raw.request(17, 1, m.SaslHandshakeRequest(mechanism="GSSAPI"))
        assert (answer.error_code, answer.mechanisms) == \
            (UNSUPPORTED_SASL_MECHANISM, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        assert raw.closed()
    finally:
        raw.close()


@pytest.mark.parametrize("token,message", [
    (b"n,,n=alice,r=abc,tokenauth=true", None),                  # delegation tokens: none here
    (b"n,a=bob,n=alice,r=abc", "Authentication failed: Client requested an authorization id "
                              "that is different from username"),
    (b"p=tls-unique,,n=alice,r=abc", None),                      # channel binding: refused
    (b"garbage", None),
])
def test_bad_scram_first_messages_are_refused(served, token, message):
    raw = Raw(served.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        answer = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=token))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert answer.error_message == (message or SCRAM_FAILED.format("SCRAM-SHA-512"))
        assert raw.closed()
    finally:
        raw.close()


def test_a_replayed_proof_with_another_nonce_fails(served):
    """The proof covers the server's fresh nonce: one recorded exchange cannot be replayed."""
    raw = Raw(served.bootstrap)
    raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    first, final = scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret")
    raw.close()
    recorded = bytes(first.auth_bytes)
    raw = Raw(served.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        fresh = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=clientnonce123"))
        assert bytes(fresh.auth_bytes) != recorded                  # a new server nonce
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        fields = dict(item.split(b"=", 1) for item in recorded.split(b","))
        salted = scram.salted_password(mech, "alice-secret", base64.b64decode(fields[b"s"]), 4096)
        stale = b"c=biws,r=" + fields[b"r"]
        proof = scram.client_proof(mech, salted, b",".join((b"n=alice,r=clientnonce123", recorded, stale)))
        answer = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=stale + b",p=" + base64.b64encode(proof)))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
    finally:
        raw.close()


# ================================================================ KIP-43 framing

def test_after_a_v0_handshake_the_tokens_are_raw_size_prefixed_frames(served):
    """SaslHandshake v0: the tokens go without Kafka headers, each way (KIP-43)."""
    raw = Raw(served.bootstrap)
    try:
        assert raw.request(17, 0, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        raw.sock.sendall(struct.pack(">i", 15) + b"\0bob\0bob-secret")
        assert raw.frame() == b""                                   # PLAIN's empty answer
        assert records_of(raw.request(1, 12, fetch_request())) == RECORDS
    finally:
        raw.close()
    raw = Raw(served.bootstrap)
    try:
        assert raw.request(17, 0, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        bare = b"n=alice,r=abcdef"
        raw.sock.sendall(struct.pack(">i", 3 + len(bare)) + b"n,," + bare)
        server_first = raw.frame()
        fields = dict(item.split(b"=", 1) for item in server_first.split(b","))
        salted = scram.salted_password(mech, "alice-secret", base64.b64decode(fields[b"s"]), int(fields[b"i"]))
        without_proof = b"c=biws,r=" + fields[b"r"]
        proof = scram.client_proof(mech, salted, b",".join((bare, server_first, without_proof)))
        final = without_proof + b",p=" + base64.b64encode(proof)
        raw.sock.sendall(struct.pack(">i", len(final)) + final)
        assert raw.frame().startswith(b"v=")
        assert records_of(raw.request(1, 12, fetch_request())) == RECORDS
    finally:
        raw.close()


def test_a_raw_token_with_a_wrong_password_closes_without_an_answer(served):
    raw = Raw(served.bootstrap)
    try:
        raw.request(17, 0, m.SaslHandshakeRequest(mechanism="PLAIN"))
        raw.sock.sendall(struct.pack(">i", 8) + b"\0bob\0bad")
        assert raw.closed()
    finally:
        raw.close()


# ================================================================ before authentication

@pytest.mark.parametrize("when", ["first", "after ApiVersions", "after the handshake"])
@pytest.mark.parametrize("api", ["Fetch", "Produce", "Metadata"])
def test_a_request_before_authentication_closes_the_connection_unanswered(served, when, api):
    """Kafka lets through only ApiVersions and the SASL exchange: anything else closes
    the connection ("Unexpected Kafka request ... during SASL handshake"); nothing is
    read or written."""
    end = served.store.log("secret", 0).log_end_offset
    raw = Raw(served.bootstrap)
    try:
        if when != "first":
            assert raw.request(18, 3, m.ApiVersionsRequest(client_software_name="t",
                                                           client_software_version="1")).error_code == 0
        if when == "after the handshake":
            assert raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        if api == "Fetch":
            raw.send(1, 12, fetch_request())
        elif api == "Produce":
            batch = pylog.records.encode_batch([b"intruder"])
            raw.send(0, 9, m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
                m.ProduceRequestTopicProduceData(name="secret", partition_data=[
                    m.ProduceRequestPartitionProduceData(index=0, records=batch)])]))
        else:
            raw.send(3, 12, m.MetadataRequest(topics=None))
        assert raw.closed()
    finally:
        raw.close()
    assert served.store.log("secret", 0).log_end_offset == end


def test_apiversions_of_an_unknown_version_is_answered_and_may_be_retried(served):
    """KIP-511 before authentication too: a v0 answer with UNSUPPORTED_VERSION and our
    ranges; the client retries with a version we speak, then authenticates."""
    raw = Raw(served.bootstrap)
    try:
        raw.correlation += 1
        frame = bytearray(encode_request(18, 3, raw.correlation, "raw", m.ApiVersionsRequest()))
        struct.pack_into(">h", frame, 6, 9)                     # ApiVersions v9
        raw.sock.sendall(frame)
        _, answer = decode_response(18, 0, raw.frame())
        assert answer.error_code == UNSUPPORTED_VERSION
        keys = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == (0, 0) and keys[51] == (0, 0)
        assert raw.request(18, 3, m.ApiVersionsRequest()).error_code == 0
        # Only once, as Kafka's: a second ApiVersions now is out of order.
        raw.send(18, 3, m.ApiVersionsRequest())
        assert raw.closed()
    finally:
        raw.close()


def test_a_frame_above_sasl_server_max_receive_size_closes_before_it_is_read(served, caplog):
    raw = Raw(served.bootstrap)
    try:
        with caplog.at_level(logging.WARNING, "pylog.broker"):
            raw.sock.sendall(struct.pack(">i", 524289) + b"\0" * 1000)     # claims 512 KiB + 1
            assert raw.closed()
        assert any("sasl.server.max.receive.size (524288)" in r.getMessage() for r in caplog.records)
    finally:
        raw.close()


def test_an_unauthenticated_connection_is_closed_after_the_authentication_timeout(tmp_path):
    with pylog.open(tmp_path) as store:
        add_user(store, "alice", "alice-secret")
        broker = sasl_broker(store, **{"pylog.connections.authentication.timeout.ms": 800})
        try:
            idle = Raw(broker.bootstrap_servers)                       # says nothing
            slow = Raw(broker.bootstrap_servers)                       # starts, never finishes
            slow.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
            good = ProtocolClient(broker.bootstrap_servers,
                                  authenticate=SaslLogin("SCRAM-SHA-512", "alice", "alice-secret"))
            start = time.monotonic()
            assert idle.closed(10) and slow.closed(10)
            assert time.monotonic() - start < 5
            time.sleep(0.5)
            assert good.metadata().brokers                             # authenticated: stays
            assert broker.stats["sasl.authentication_timeouts"] == 2
            for c in (idle, slow, good):
                c.close()
        finally:
            broker.shutdown()


def test_after_authentication_sasl_requests_get_illegal_sasl_state(served):
    """As on Kafka: with re-authentication off, SaslHandshake and SaslAuthenticate after
    authentication are answered ILLEGAL_SASL_STATE and the connection stays."""
    with ProtocolClient(served.bootstrap, authenticate=SaslLogin("PLAIN", "bob", "bob-secret")) as client:
        assert client.request(17, m.SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ILLEGAL_SASL_STATE
        answer = client.request(36, m.SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-secret"), 2)
        assert answer.error_code == ILLEGAL_SASL_STATE
        assert client.metadata().brokers


# ================================================================ KIP-368

@pytest.fixture(scope="module")
def reauth(tmp_path_factory):
    store = pylog.open(str(tmp_path_factory.mktemp("reauth")))
    store.create_topic("secret", 1)
    store.log("secret", 0).append_records(RECORDS)
    add_user(store, "alice", "alice-secret")
    add_user(store, "dave", "dave-secret")
    broker = sasl_broker(store, **{"connections.max.reauth.ms": 1500,
                                   "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": 600000})
    try:
        yield Served(store, broker)
    finally:
        broker.shutdown()
        store.close()


def test_the_session_lifetime_is_told_and_enforced(reauth):
    """SaslAuthenticate v1+ carries connections.max.reauth.ms (per mechanism: PLAIN's is
    overridden for the listener); past it, a request closes the connection."""
    raw = Raw(reauth.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        _, final = scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret", version=1)
        assert (final.error_code, final.session_lifetime_ms) == (0, 1500)
        assert records_of(raw.request(1, 12, fetch_request())) == RECORDS
        time.sleep(1.7)
        raw.send(1, 12, fetch_request())
        assert raw.closed()
    finally:
        raw.close()
    raw = Raw(reauth.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN"))
        answer = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-secret"))
        assert (answer.error_code, answer.session_lifetime_ms) == (0, 600000)
    finally:
        raw.close()


def test_reauthentication_extends_the_session(reauth):
    raw = Raw(reauth.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret")
        for _ in range(3):                                      # 3 x 1 s > 1.5 s lifetime
            time.sleep(1.0)
            assert raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code == 0
            _, final = scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret")
            assert (final.error_code, final.session_lifetime_ms) == (0, 1500)
            assert records_of(raw.request(1, 12, fetch_request())) == RECORDS
    finally:
        raw.close()


@pytest.mark.parametrize("how,message", [
    ("another user", "Cannot change principals during re-authentication from User.alice: User.dave"),
    ("another mechanism", "SASL mechanism 'PLAIN' requested by client is not supported for "
                          "re-authentication of mechanism 'SCRAM-SHA-512'")])
def test_reauthentication_keeps_the_principal_and_the_mechanism(reauth, how, message):
    raw = Raw(reauth.bootstrap)
    try:
        raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        scram_exchange(raw, "SCRAM-SHA-512", "alice", "alice-secret")
        time.sleep(1.0)                                        # one re-authentication a second
        if how == "another user":
            raw.request(17, 1, m.SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
            _, answer = scram_exchange(raw, "SCRAM-SHA-512", "dave", "dave-secret")
        else:
            assert raw.request(17, 1, m.SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
            answer = raw.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\0bob\0bob-secret"))
        assert (answer.error_code, answer.error_message) == (SASL_AUTHENTICATION_FAILED, message)
        assert raw.closed()
    finally:
        raw.close()


# ================================================================ credentials over the wire

def _upsert(user: str, mechanism: int, password: str, iterations: int = 4096, salt: bytes = b"salt" * 4):
    mech = scram.MECHANISMS_BY_TYPE.get(mechanism, scram.MECHANISMS["SCRAM-SHA-256"])
    return m.AlterUserScramCredentialsRequestScramCredentialUpsertion(
        name=user, mechanism=mechanism, iterations=iterations, salt=salt,
        salted_password=scram.salted_password(mech, password, salt, iterations))


def test_alter_and_describe_user_scram_credentials_with_kafkas_errors(served):
    admin = SaslLogin("PLAIN", "admin", "admin-secret")
    with ProtocolClient(served.bootstrap, authenticate=admin) as client:
        answer = client.request(51, m.AlterUserScramCredentialsRequest(
            deletions=[m.AlterUserScramCredentialsRequestScramCredentialDeletion(name="ghost", mechanism=1),
                       m.AlterUserScramCredentialsRequestScramCredentialDeletion(name="twice", mechanism=1)],
            upsertions=[_upsert("erin", 2, "erin-secret"), _upsert("erin256", 1, "e", 8192),
                        _upsert("few", 2, "x", 4095), _upsert("many", 2, "x", 16385),
                        _upsert("", 2, "x"), _upsert("what", 7, "x"), _upsert("twice", 2, "x"),
                        m.AlterUserScramCredentialsRequestScramCredentialUpsertion(
                            name="short", mechanism=2, iterations=4096, salt=b"s", salted_password=b"x" * 32)]), 0)
        got = {r.user: (r.error_code, r.error_message) for r in answer.results}
        assert got == {
            "erin": (0, None), "erin256": (0, None),
            "ghost": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "twice": (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"),
            "few": (UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
            "many": (UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
            "": (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
            "what": (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
            "short": (UNACCEPTABLE_CREDENTIAL, "the salted password must be 64 bytes (one "
                                               "SCRAM-SHA-512 digest), got 32")}
        described = client.request(50, m.DescribeUserScramCredentialsRequest(users=[
            m.DescribeUserScramCredentialsRequestUserName(name=n) for n in ("erin", "erin256", "few", "erin")]), 0)
        assert described.error_code == 0
        got = {r.user: (r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
               for r in described.results}
        assert got == {"erin": (DUPLICATE_RESOURCE, []), "erin256": (0, [(1, 8192)]),
                       "few": (RESOURCE_NOT_FOUND, [])}
        everyone = client.request(50, m.DescribeUserScramCredentialsRequest(users=None), 0)
        assert {r.user for r in everyone.results} >= {"alice", "carol", "erin", "erin256"}
    # The new users log in; nothing of the password is stored.
    with ProtocolClient(served.bootstrap, authenticate=SaslLogin("SCRAM-SHA-512", "erin", "erin-secret")) as c:
        assert c.metadata().brokers
    for d in served.store.log_dirs:
        text = (Path(d) / "pylog-scram-credentials.json").read_text()
        assert "erin-secret" not in text and '"erin"' in text


def test_describe_configs_never_shows_a_jaas_config(tmp_path):
    with pylog.open(tmp_path) as store:
        broker = sasl_broker(store, **{"sasl.enabled.mechanisms": "PLAIN"})
        try:
            with ProtocolClient(broker.bootstrap_servers,
                                authenticate=SaslLogin("PLAIN", "admin", "admin-secret")) as client:
                answer = client.request(32, m.DescribeConfigsRequest(resources=[
                    m.DescribeConfigsRequestDescribeConfigsResource(
                        resource_type=4, resource_name="0", configuration_keys=None)],
                    include_synonyms=True), 4)
            entries = {e.name: e for e in answer.results[0].configs}
            jaas = entries["sasl.jaas.config"]
            assert (jaas.value, jaas.is_sensitive, jaas.config_type) == (None, True, 9)
            assert entries["sasl.enabled.mechanisms"].value == "PLAIN"
            assert "admin-secret" not in repr(answer)
        finally:
            broker.shutdown()


# ================================================================ configs that cannot work

@pytest.mark.parametrize("config,message", [
    ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": None},
     "PLAIN is in sasl.enabled.mechanisms but no PLAIN users are configured: set "
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.jaas.config": PLAIN_JAAS},
     "set listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "must be a non-empty list of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"listener.name.plaintext.sasl.enabled.mechanisms": "PLAIN"}, "no listener is named 'plaintext'"),
    ({"listener.name.sasl_plaintext.log.retention.ms": "5"}, "not a key a listener sets for itself"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "org.example.Other required;"},
     "PLAIN's login module is org.apache.kafka.common.security.plain.PlainLoginModule"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"x\";"},
     "has no user_<name>"),
    ({"pylog.sasl.jaas.file": "/nonexistent/jaas.conf",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": None}, "No such file"),
])
def test_a_sasl_listener_that_cannot_work_is_refused_at_start(tmp_path, config, message):
    with pylog.open(tmp_path) as store:
        values = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                  "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **config}
        values = {k: v for k, v in values.items() if v is not None}
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            pylog.Broker(store, listen="SASL_PLAINTEXT://127.0.0.1:0", config=values)


@pytest.mark.parametrize("listen,config,message", [
    ("SSL://127.0.0.1:0", {}, "listener SSL://127.0.0.1:0 (SSL) needs a key store"),
    ("SASL_SSL://127.0.0.1:0", {}, "listener SASL_SSL://127.0.0.1:0 (SASL_SSL) needs a key store"),
    ("CLIENT://127.0.0.1:0", {}, "no security protocol defined for listener CLIENT"),
])
def test_listeners_pylog_cannot_open_are_refused(tmp_path, listen, config, message):
    with pylog.open(tmp_path) as store:
        with pytest.raises(ConfigError, match=re.escape(message)):
            pylog.Broker(store, listen=listen, config=config)


def test_a_named_listener_gets_its_protocol_from_the_map_and_its_users_from_a_jaas_file(tmp_path):
    """listener.security.protocol.map names the listener's protocol; PLAIN's users come
    from Kafka's JAAS file, the listener's own section first."""
    jaas = tmp_path / "kafka_server_jaas.conf"
    jaas.write_text('KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                    '  user_other="x";\n};\nclient.KafkaServer {\n'
                    '  org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                    '  user_frank="frank-secret";\n};\n')
    with pylog.open(tmp_path / "data") as store:
        broker = pylog.Broker(store, listen="CLIENT://127.0.0.1:0", config={
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
            "pylog.sasl.jaas.file": str(jaas)}).start()
        try:
            assert (broker.listener.name, broker.listener.security_protocol) == ("CLIENT", "SASL_PLAINTEXT")
            with ProtocolClient(broker.bootstrap_servers,
                                authenticate=SaslLogin("PLAIN", "frank", "frank-secret")) as client:
                assert client.metadata().brokers
            with pytest.raises(ProtocolError, match="Invalid username or password"):
                ProtocolClient(broker.bootstrap_servers, authenticate=SaslLogin("PLAIN", "other", "x"))
        finally:
            broker.shutdown()


def test_a_plaintext_listener_is_anonymous(tmp_path):
    with pylog.open(tmp_path) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        with ProtocolClient(broker.bootstrap_servers) as client:
            assert client.metadata().brokers
            with broker._lock:
                assert {c.principal for c in broker._connections} == {"User:ANONYMOUS"}
                assert {c.listener.security_protocol for c in broker._connections} == {"PLAINTEXT"}
