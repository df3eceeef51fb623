"""Protocol fuzzing of whole connections against `pylog serve` in a child process:
random bytes, truncated frames, huge size prefixes (also held open, many at once),
valid headers with garbage bodies. The broker never crashes, its peak resident memory
(VmHWM) stays under 512 MiB through the whole run, and the records stored before are
intact and served afterwards."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pylog
from pylog.protocol.api import SUPPORTED
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess

# long: handed out first on the xdist workers (tests/conftest.py)
pytestmark = pytest.mark.slow

RSS_LIMIT_KIB = 512 * 1024


@pytest.fixture(scope="module")
def victim(tmp_path_factory):
    data = tmp_path_factory.mktemp("fuzz")
    with pylog.open(data) as store:
        store.create_topic("kept", 1)
        store.log("kept", 0).append_records([b"record-%d" % i for i in range(100)])
    with ServeProcess(str(data), "connections.max.idle.ms=2000") as served:
        yield served
        assert served.alive(), "the broker died during fuzzing"
        assert served.status("VmHWM") < RSS_LIMIT_KIB
        with ProtocolClient(served.bootstrap) as client:
            part = client.fetch("kept", 0, 0, max_bytes=1 << 20)
            values = pylog.records.decode_arrow(bytes(part.records)).column("value").to_pylist()
            assert values == [b"record-%d" % i for i in range(100)]
    # Every bad connection got one log line; no handler failed with a traceback.
    assert "Traceback" not in served.stderr and "unexpected error" not in served.stderr, served.stderr[-3000:]


def exchange(served, payload: bytes, read: bool = True) -> None:
    host, _, port = served.bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        try:
            s.sendall(payload)
            if read:
                s.settimeout(0.2)
                s.recv(1 << 16)
        except (TimeoutError, ConnectionError, OSError):
            pass


def header(key: int, version: int, correlation: int = 1) -> bytes:
    return struct.pack(">hhih", key, version, correlation, -1)


frames = st.one_of(
    st.binary(max_size=200),                                        # random bytes
    st.builds(lambda n, body: struct.pack(">i", n) + body,          # any size prefix
              st.integers(-(2**31), 2**31 - 1), st.binary(max_size=100)),
    st.builds(lambda key, v, body: struct.pack(">i", 8 + len(body)) + header(key, v) + body,
              st.sampled_from(sorted(SUPPORTED) + [17, 99, -1]), st.integers(-1, 20),
              st.binary(max_size=300)),                             # valid header, garbage body
    st.builds(lambda key, v, body, cut: (struct.pack(">i", 8 + len(body)) + header(key, v) + body)[:cut],
              st.sampled_from(sorted(SUPPORTED)), st.integers(0, 12), st.binary(min_size=1, max_size=300),
              st.integers(0, 300)),                                 # truncated frames
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow], deadline=None)
@given(st.lists(frames, min_size=1, max_size=4))
def test_random_connections_never_crash_the_broker(victim, payloads):
    exchange(victim, b"".join(payloads))
    assert victim.alive()


def test_many_connections_claiming_huge_requests_cost_only_what_they_send(victim):
    socks = []
    host, _, port = victim.bootstrap.rpartition(":")
    before = victim.status("VmRSS")
    try:
        for _ in range(50):
            s = socket.create_connection((host, int(port)), timeout=5)
            # 100 MB claimed (the default socket.request.max.bytes), 64 KiB sent, held open.
            s.sendall(struct.pack(">i", 104857600) + header(0, 9) + b"\x00" * (64 << 10))
            socks.append(s)
        grown = victim.status("VmRSS") - before
        assert grown < 100 * 1024, f"{grown} KiB for 50 connections that sent 3.2 MB"
    finally:
        for s in socks:
            s.close()
    assert victim.alive() and victim.status("VmHWM") < RSS_LIMIT_KIB
