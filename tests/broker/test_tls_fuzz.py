"""Hostile connections to the SSL and SASL_SSL listeners of `pylog serve`, before the TLS
handshake completes and right after it: plaintext Kafka frames and garbage where a
ClientHello belongs, TLS records with random contents, ClientHellos cut short and held
open, and test_fuzz.py's hostile frames sent through a finished handshake (on SASL_SSL:
before authenticating), huge size prefixes held open too. The broker stays up, its peak
resident memory under 512 MiB, handshakes that never finish are closed after
pylog.ssl.handshake.timeout.ms, and the stored records are intact and served over TLS
(and SASL_SSL) afterwards."""

from __future__ import annotations

import socket
import ssl
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
from .test_fuzz import RSS_LIMIT_KIB, frames, header

HANDSHAKE_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def victim(tmp_path_factory, tls_certs):
    data = tmp_path_factory.mktemp("tls-fuzz")
    with pylog.open(data) as store:
        store.create_topic("kept", 1)
        store.log("kept", 0).append_records([b"record-%d" % i for i in range(100)])
        mech = scram.MECHANISMS["SCRAM-SHA-512"]
        store.alter_user_scram_credentials(upsertions=[("alice", mech.name,
                                                        scram.new_credential(mech, "alice-secret"))])
    with ServeProcess(str(data), "connections.max.idle.ms=2000", "ssl.keystore.type=PEM",
                      f"ssl.keystore.location={tls_certs.server}",
                      f"pylog.ssl.handshake.timeout.ms={HANDSHAKE_TIMEOUT_MS}",
                      "sasl.enabled.mechanisms=SCRAM-SHA-512",
                      listen="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0") as served:
        served.context = ssl.create_default_context(cafile=str(tls_certs.ca))
        yield served
        assert served.alive(), "the broker died during fuzzing"
        assert served.status("VmHWM") < RSS_LIMIT_KIB
        for listener, login in (("SSL", None), ("SASL_SSL", SaslLogin("SCRAM-SHA-512", "alice", "alice-secret"))):
            with ProtocolClient(served.listeners[listener], ssl_context=served.context,
                                authenticate=login) as client:
                part = client.fetch("kept", 0, 0, max_bytes=1 << 20)
                values = pylog.records.decode_arrow(bytes(part.records)).column("value").to_pylist()
                assert values == [b"record-%d" % i for i in range(100)]
    assert "Traceback" not in served.stderr and "unexpected error" not in served.stderr, \
        served.stderr[-3000:]


def _address(served, listener: str = "SSL") -> tuple[str, int]:
    host, _, port = served.listeners[listener].rpartition(":")
    return host, int(port)


def client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a real TLS client (its ClientHello record)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _send(served, payload: bytes) -> None:
    with socket.create_connection(_address(served), timeout=5) as s:
        try:
            s.sendall(payload)
            s.settimeout(0.2)
            s.recv(1 << 16)
        except (TimeoutError, ConnectionError, OSError):
            pass


# What arrives where a ClientHello belongs: Kafka frames (a PLAINTEXT client on the SSL
# port), TLS record headers of every type and length with random contents, garbage.
before_handshake = st.one_of(
    frames,
    st.builds(lambda kind, version, body: struct.pack(">BHH", kind, version, len(body)) + body,
              st.sampled_from([20, 21, 22, 23, 24, 0, 255]), st.sampled_from([0x0301, 0x0303, 0x0304, 0]),
              st.binary(max_size=400)),
    st.builds(lambda kind, claimed, body: struct.pack(">BHH", kind, 0x0301, claimed) + body,
              st.sampled_from([22, 23]), st.integers(0, 65535), st.binary(max_size=200)),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow], deadline=None)
@given(st.lists(before_handshake, min_size=1, max_size=3))
def test_garbage_before_the_handshake_never_crashes_the_broker(victim, payloads):
    _send(victim, b"".join(payloads))
    assert victim.alive()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                  HealthCheck.too_slow], deadline=None)
@given(st.integers(1, 400), st.binary(max_size=300))
def test_a_client_hello_cut_short_or_followed_by_garbage(victim, cut, tail):
    hello = client_hello(victim.context)
    _send(victim, hello[:cut] + (tail if cut % 2 else b""))
    assert victim.alive()


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                  HealthCheck.too_slow], deadline=None)
@given(st.lists(frames, min_size=1, max_size=4))
def test_hostile_frames_right_after_the_handshake(victim, listener, payloads):
    """On SASL_SSL these come before authentication: the Authenticator's bounds
    (sasl.server.max.receive.size, only the SASL exchange) inside TLS."""
    with socket.create_connection(_address(victim, listener), timeout=5) as raw, \
            victim.context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        try:
            s.sendall(b"".join(payloads))
            s.settimeout(0.2)
            s.recv(1 << 16)
        except (TimeoutError, ConnectionError, OSError):
            pass
    assert victim.alive()


def test_half_handshakes_held_open_are_bounded_and_closed(victim):
    """200 connections each send half a ClientHello and wait: memory grows by little, and
    every one is closed after pylog.ssl.handshake.timeout.ms."""
    hello = client_hello(victim.context)
    before = victim.status("VmRSS")
    socks = []
    try:
        for _ in range(200):
            s = socket.create_connection(_address(victim), timeout=10)
            s.sendall(hello[:len(hello) // 2])
            socks.append(s)
        time.sleep(0.5)
        grown = victim.status("VmRSS") - before
        assert grown < 64 * 1024, f"{grown} KiB for 200 half handshakes"
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_MS / 1000 + 20
        for s in socks:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            assert s.recv(1 << 16) == b""           # closed by the broker, no answer
    finally:
        for s in socks:
            s.close()
    assert victim.alive()


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_huge_claims_after_the_handshake_cost_only_what_they_send(victim, listener):
    """50 TLS connections claim 100 MB requests and send 64 KiB each, held open: the
    broker holds what arrived, not what was claimed (as over PLAINTEXT); on SASL_SSL,
    before authenticating, the claim is above sasl.server.max.receive.size and the
    connection closes."""
    socks = []
    before = victim.status("VmRSS")
    try:
        for _ in range(50):
            raw = socket.create_connection(_address(victim, listener), timeout=10)
            s = victim.context.wrap_socket(raw, server_hostname="127.0.0.1")
            socks.append(s)
            try:
                s.sendall(struct.pack(">i", 104857600) + header(0, 9) + b"\x00" * (64 << 10))
            except OSError:
                assert listener == "SASL_SSL"        # closed at the size prefix
        time.sleep(0.5)
        grown = victim.status("VmRSS") - before
        assert grown < 100 * 1024, f"{grown} KiB for 50 connections that sent 3.2 MB"
    finally:
        for s in socks:
            s.close()
    assert victim.alive() and victim.status("VmHWM") < RSS_LIMIT_KIB
