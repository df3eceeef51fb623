"""Fetch over TLS, observed from outside the broker as test_zero_copy.py observes
PLAINTEXT: strace counts what a `pylog serve` process moves with sendfile(2) and what it
reads into user space while a client fetches a topic through an SSL listener.

With kTLS (the kernel's tls module and OpenSSL 3) every fetched byte leaves by
sendfile, encrypted by the kernel, for TLS 1.2 and TLS 1.3 alike; where kTLS is
unavailable, or switched off (pylog.ssl.ktls.enable=false), the records are read and
encrypted in user space, and the broker says so once at start-up. The kTLS tests skip on
kernels without kTLS (tools/ktls-vm runs them in a VM with one).
"""

from __future__ import annotations

import os
import shutil
import ssl
import struct
import subprocess
import threading
import time

import pytest

import pylog
from pylog.broker.tls import ktls_support
from pylog.protocol import encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess, wait_until
from .test_zero_copy import attached, strace_counts

TOTAL = 8 << 20
NEEDS_KTLS = pytest.mark.skipif(not ktls_support().available,
                                reason=f"no kTLS here: {ktls_support().why}")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A store with one topic of TOTAL bytes of incompressible records."""
    path = tmp_path_factory.mktemp("tls-data")
    with pylog.open(path) as store:
        store.create_topic("big", 1)
        log = store.log("big", 0)
        value = os.urandom(1000)
        for _ in range(TOTAL // (1000 * 500)):
            log.append_records([value] * 500)
    return path


def _serve(data, certs, *overrides: str) -> ServeProcess:
    return ServeProcess(str(data), "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.server}",
                        *overrides, listen="SSL://127.0.0.1:0")


def _fetch_all(bootstrap: str, certs, version: ssl.TLSVersion) -> tuple[int, bytes]:
    """Fetches the whole topic over TLS `version`: (bytes fetched, the last records)."""
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.minimum_version = ctx.maximum_version = version
    fetched, last = 0, b""
    with ProtocolClient(bootstrap, ssl_context=ctx) as client:
        assert client.sock.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2",
                                         ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
        offset, end = 0, client.list_offset("big", 0, -1)
        while offset < end:
            part = client.fetch("big", 0, offset, max_bytes=1 << 20)
            assert part.error_code == 0
            fetched += len(part.records)
            last = bytes(part.records)
            offset = pylog.records.scan_batches(part.records).last_offset + 1
    return fetched, last


def _traced(served: ServeProcess, trace, work):
    """Runs work() while strace watches the broker's sendfile and reads; the counts."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (tools/setup.sh installs it as root)")
    tracer = subprocess.Popen([strace, "-f", "-qq", "-e",
                               "trace=sendfile,read,pread64,readv,preadv,preadv2",
                               "-p", str(served.pid), "-o", str(trace)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert wait_until(lambda: attached(tracer, served.pid), 30), "strace did not attach"
    if tracer.poll() is not None:
        pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode().strip()}")
    try:
        result = work()
        time.sleep(0.3)
    finally:
        tracer.terminate()
        tracer.wait(10)
        tracer.stderr.close()
    return result, strace_counts(str(trace))


def _stored_tail(data) -> bytes:
    with pylog.open(data) as store:
        log = store.log("big", 0)
        return log.read(log.log_end_offset - 1, 1 << 20).read()


@NEEDS_KTLS
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_fetch_leaves_by_sendfile_with_ktls(tmp_path, data, tls_certs, version):
    """kTLS: the kernel encrypts what the broker sendfile()s, for TLS 1.2 and 1.3; the
    client decrypts the records it would have got over PLAINTEXT."""
    with _serve(data, tls_certs) as served:
        (fetched, last), counts = _traced(
            served, tmp_path / "trace.txt", lambda: _fetch_all(served.bootstrap, tls_certs, version))
        lines = served.log_lines()
    copied = sum(counts.get(name, 0) for name in ("read", "pread64", "readv", "preadv", "preadv2"))
    assert fetched >= TOTAL - (1 << 20)
    assert counts.get("sendfile", 0) >= fetched, counts
    assert copied < fetched / 50, counts
    assert last.endswith(_stored_tail(data)[-1000:])
    assert not [line for line in lines if "TLS listeners" in line]     # kTLS: info, not a warning


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_fetch_without_ktls_copies_and_says_so_once(tmp_path, data, tls_certs, version):
    """pylog.ssl.ktls.enable=false (or no kTLS in the kernel): the records are read into
    user space and encrypted there (no sendfile), correctly; the broker's log says so
    once, at start-up."""
    with _serve(data, tls_certs, "pylog.ssl.ktls.enable=false") as served:
        (fetched, last), counts = _traced(
            served, tmp_path / "trace.txt", lambda: _fetch_all(served.bootstrap, tls_certs, version))
        _fetch_all(served.bootstrap, tls_certs, version)          # a second client: no new line
        lines = served.log_lines()
    copied = sum(counts.get(name, 0) for name in ("read", "pread64", "readv", "preadv", "preadv2"))
    assert fetched >= TOTAL - (1 << 20)
    assert counts.get("sendfile", 0) == 0, counts
    assert copied >= fetched, counts
    assert last.endswith(_stored_tail(data)[-1000:])
    said = [line for line in lines if "TLS listeners" in line]
    assert len(said) == 1 and "kTLS disabled (pylog.ssl.ktls.enable=false)" in said[0], lines


def test_tls_engine_says_which_and_why():
    """pylog.tls_engine(): kTLS and why, or user space and why (as pylog.io_engine())."""
    said = pylog.tls_engine()
    if ktls_support().available:
        assert said.startswith("kTLS (kernel TLS (the tls module) with OpenSSL 3")
    else:
        assert said.startswith("user space (OpenSSL") and "no kTLS: " in said
    assert pylog.tls_engine(False).startswith("user space") and "disabled" in pylog.tls_engine(False)


@pytest.mark.parametrize("ktls", [True, False])
def test_a_tls13_key_update_keeps_the_connection_serving(tmp_path, tls_certs, ktls):
    """openssl s_client asks for a TLS 1.3 KeyUpdate ("K") between two requests: the
    broker answers the next request and the client reads it (with kTLS the kernel keeps
    the key it sends with: OpenSSL 3.0 cannot re-key it, and answers a KeyUpdate only
    when it writes itself; without, OpenSSL updates both)."""
    if ktls and not ktls_support().available:
        pytest.skip(f"no kTLS here: {ktls_support().why}")
    overrides = () if ktls else ("pylog.ssl.ktls.enable=false",)
    frame = encode_request(18, 0, 7, "ku", m.ApiVersionsRequest())
    with _serve(tmp_path, tls_certs, *overrides) as served:
        client = subprocess.Popen(["openssl", "s_client", "-connect", served.bootstrap, "-tls1_3",
                                   "-CAfile", str(tls_certs.ca)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.extend(iter(
            lambda: os.read(client.stdout.fileno(), 65536), b"")), daemon=True)
        reader.start()

        def answers(count: int) -> int:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                got = b"".join(out).count(struct.pack(">i", 7) + b"\0\0")   # correlation id 7
                if got >= count:
                    return got
                time.sleep(0.1)
            return got
        try:
            client.stdin.write(frame)
            client.stdin.flush()
            assert answers(1) == 1
            client.stdin.write(b"K\n")                 # s_client: KeyUpdate, update_requested
            client.stdin.flush()
            time.sleep(1)
            client.stdin.write(frame)
            client.stdin.flush()
            assert answers(2) == 2
        finally:
            client.stdin.close()
            client.terminate()
            client.wait(10)
            client.stdout.close()
            reader.join(10)
            err = client.stderr.read().decode()
            client.stderr.close()
        assert "KEYUPDATE" in err and "error" not in err.lower(), err
        assert served.alive()
