"""The hostile-request suite sent before authenticating, against `pylog serve` with a
SASL_PLAINTEXT listener: test_fuzz.py's random connections (random bytes, any size
prefix, valid headers with garbage bodies, truncated frames), connections that claim the
largest frame allowed and hold it, test_request_bounds.py's two-million-topic Metadata,
and connections that never finish. The broker never crashes, never answers anything but
ApiVersions and the SASL exchange, its peak resident memory stays bounded, and an
authenticated client then reads the stored records intact."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog
from pylog.common import scram
from pylog.protocol.client import ProtocolClient
from pylog.remote.sasl import SaslLogin

from .process import ServeProcess
from .test_fuzz import frames, header

# long: handed out first on the xdist workers (tests/conftest.py)
pytestmark = pytest.mark.slow

RSS_LIMIT_KIB = 512 * 1024
RECORDS = [b"secret-record-%d" % i for i in range(100)]
LOGIN = SaslLogin("SCRAM-SHA-512", "alice", "alice-secret")
PRE_AUTH_MAX = 524288          # sasl.server.max.receive.size, Kafka's default


@pytest.fixture(scope="module")
def victim(tmp_path_factory):
    data = tmp_path_factory.mktemp("sasl-fuzz")
    with pylog.open(data) as store:
        store.create_topic("kept", 1)
        store.log("kept", 0).append_records(RECORDS)
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        store.alter_user_scram_credentials(upsertions=[("alice", mech.name, scram.new_credential(mech, "alice-secret"))])
    with ServeProcess(str(data), "sasl.enabled.mechanisms=SCRAM-SHA-512", "connections.max.idle.ms=5000",
                      "pylog.connections.authentication.timeout.ms=3000",
                      "connection.failed.authentication.delay.ms=0",
                      listen="SASL_PLAINTEXT://127.0.0.1:0") as served:
        yield served
        assert served.alive(), "the broker died during fuzzing"
        assert served.status("VmHWM") < RSS_LIMIT_KIB
        with ProtocolClient(served.bootstrap, authenticate=LOGIN) as client:
            part = client.fetch("kept", 0, 0, max_bytes=1 << 20)
            values = pylog.records.decode_arrow(bytes(part.records)).column("value").to_pylist()
            assert values == RECORDS
    assert "Traceback" not in served.stderr and "unexpected error" not in served.stderr, served.stderr[-3000:]


def exchange(served, payload: bytes) -> bytes:
    """Sends `payload` unauthenticated; returns everything the broker answered until it
    closed the connection or went quiet."""
    host, _, port = served.bootstrap.rpartition(":")
    got = b""
    with socket.create_connection((host, int(port)), timeout=5) as s:
        try:
            s.sendall(payload)
            s.settimeout(0.3)
            while chunk := s.recv(1 << 16):
                got += chunk
        except (TimeoutError, ConnectionError, OSError):
            pass
    return got


def answered_keys(answer: bytes, sent: bytes) -> set[int]:
    """The API keys of the requests in `sent` that `answer` holds responses to (matched by
    correlation id; pre-authentication requests carry distinct ones)."""
    correlations, pos = set(), 0
    while pos + 4 <= len(answer):
        size = struct.unpack_from(">i", answer, pos)[0]
        if size < 4 or pos + 4 + size > len(answer):
            break
        correlations.add(struct.unpack_from(">i", answer, pos + 4)[0])
        pos += 4 + size
    keys, pos = set(), 0
    while pos + 12 <= len(sent):
        size = struct.unpack_from(">i", sent, pos)[0]
        if size < 8:
            break
        key, _, correlation = struct.unpack_from(">hhi", sent, pos + 4)
        if correlation in correlations:
            keys.add(key)
        pos += 4 + size
    return keys


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow], deadline=None)
@given(st.lists(frames, min_size=1, max_size=4))
def test_random_connections_before_authenticating_get_nothing_but_the_sasl_exchange(victim, payloads):
    sent = b"".join(payloads)
    answer = exchange(victim, sent)
    assert b"secret-record" not in answer
    assert answered_keys(answer, sent) <= {17, 18, 36}
    assert victim.alive()


def test_connections_holding_the_largest_pre_auth_frame_cost_what_they_send(victim):
    """Each claims sasl.server.max.receive.size and sends half of it; a bigger claim is
    closed at its size prefix. The growth is bounded by what was sent, and the connections
    are closed at pylog.connections.authentication.timeout.ms."""
    host, _, port = victim.bootstrap.rpartition(":")
    before = victim.status("VmRSS")
    held, refused = [], []
    try:
        for _ in range(40):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(struct.pack(">i", PRE_AUTH_MAX) + header(18, 3) + b"\0" * (PRE_AUTH_MAX // 2))
            held.append(s)
            big = socket.create_connection((host, int(port)), timeout=5)
            big.sendall(struct.pack(">i", PRE_AUTH_MAX + 1) + header(3, 12) + b"\0" * 1024)
            refused.append(big)
        grown = victim.status("VmRSS") - before
        assert grown < 60 * 1024, f"{grown} KiB for 40 connections that sent 10 MiB"
        for s in refused:
            s.settimeout(5)
            assert s.recv(1) == b""                       # closed before being read
        time.sleep(3.5)                                   # the authentication timeout
        for s in held:
            s.settimeout(5)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in held + refused:
            s.close()
    assert victim.alive() and victim.status("VmHWM") < RSS_LIMIT_KIB


def test_two_million_topics_before_authenticating_are_never_decoded(victim):
    """test_request_bounds.py's 4 MB Metadata, and one that fits the pre-auth bound
    (200,000 names in 400 KB): both close the connection, unanswered and undecoded."""
    for names in (2_000_000, 200_000):
        body = struct.pack(">i", names) + b"\0\0" * names
        frame = header(3, 1) + body
        answer = exchange(victim, struct.pack(">i", len(frame)) + frame)
        assert answer == b""
    assert victim.alive() and victim.status("VmHWM") < RSS_LIMIT_KIB
