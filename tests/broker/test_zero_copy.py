"""Zero-copy fetch, observed from outside the broker: strace counts the bytes the
`pylog serve` process moves with sendfile(2) and the bytes it reads into user space
while a consumer fetches a topic. Every fetched byte must go through sendfile; reads
stay a tiny fraction (a regression to read+send would double them). And the responses
to pipelined requests leave in few send(2) calls, not one each."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import pytest

import pylog
from pylog.protocol import encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess, wait_until

TOTAL = 24 << 20


def attached(tracer: subprocess.Popen, pid: int) -> bool:
    """Whether strace has attached to every thread of `pid` (or has exited)."""
    if tracer.poll() is not None:
        return True
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/status") as f:
                if f"TracerPid:\t{tracer.pid}\n" not in f.read():
                    return False
    except FileNotFoundError:          # a thread ended meanwhile: look again
        return False
    return True


def strace_counts(path: str) -> dict[str, int]:
    """Bytes returned per syscall name in an strace -f output file."""
    counts: dict[str, int] = {}
    pattern = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\(.*\)\s+=\s+(\d+)")
    resumed = re.compile(r"<\.\.\. (\w+) resumed>.*\)\s+=\s+(\d+)")
    with open(path) as f:
        for line in f:
            found = pattern.search(line) or resumed.search(line)
            if found:
                counts[found.group(1)] = counts.get(found.group(1), 0) + int(found.group(2))
    return counts


def test_fetched_records_leave_by_sendfile_not_through_user_space(tmp_path):
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (tools/setup.sh installs it as root)")
    data = tmp_path / "data"
    with pylog.open(data) as store:
        store.create_topic("big", 1)
        log = store.log("big", 0)
        value = os.urandom(1000)
        for _ in range(TOTAL // (1000 * 500)):
            log.append_records([value] * 500)
        size = log.size
    with ServeProcess(str(data)) as served:
        trace = tmp_path / "trace.txt"
        tracer = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=sendfile,read,pread64,readv,preadv,preadv2",
                                   "-p", str(served.pid), "-o", str(trace)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert wait_until(lambda: attached(tracer, served.pid), 30)
        if tracer.poll() is not None:
            pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode().strip()}")
        fetched = 0
        with ProtocolClient(served.bootstrap) as client:
            offset = 0
            end = client.list_offset("big", 0, -1)
            while offset < end:
                part = client.fetch("big", 0, offset, max_bytes=1 << 20)
                assert part.error_code == 0
                fetched += len(part.records)
                offset = pylog.records.scan_batches(part.records).last_offset + 1
        # strace writes a call's line once the call has returned: wait for the last ones
        # (a broker that copies never gets there; the assertions below say how).
        wait_until(lambda: strace_counts(str(trace)).get("sendfile", 0) >= fetched, 10)
        tracer.terminate()
        tracer.wait(10)
        tracer.stderr.close()
    counts = strace_counts(str(trace))
    copied = sum(counts.get(name, 0) for name in ("read", "pread64", "readv", "preadv", "preadv2"))
    assert fetched >= size - (1 << 20)
    assert counts.get("sendfile", 0) >= fetched
    assert copied < fetched / 50, counts


def test_pipelined_responses_leave_in_few_sends(tmp_path):
    """A client that pipelines 500 produce requests gets its 500 responses, in order, in
    far fewer send(2) calls than responses: the loop answers buffered requests without
    suspending and writes their responses together (broker/connection.py)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (tools/setup.sh installs it as root)")
    with pylog.open(tmp_path / "data") as store:
        store.create_topic("t", 1)
    batch = pylog.records.encode_batch([b"v" * 100])
    body = m.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[m.ProduceRequestTopicProduceData(
        name="t", partition_data=[m.ProduceRequestPartitionProduceData(index=0, records=batch)])])
    with ServeProcess(str(tmp_path / "data")) as served, ProtocolClient(served.bootstrap) as client:
        version = min(client.version(0), 12)     # v13 names topics by id; this one by name
        frames = b"".join(encode_request(0, version, cid, client.client_id, body) for cid in range(500))
        trace = tmp_path / "trace.txt"
        tracer = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=sendto,sendmsg,write,writev",
                                   "-p", str(served.pid), "-o", str(trace)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert wait_until(lambda: attached(tracer, served.pid), 30)
        if tracer.poll() is not None:
            pytest.skip(f"strace cannot attach here: {tracer.stderr.read().decode().strip()}")
        client.sock.sendall(frames)                 # all 500 at once: the broker finds them queued
        errors = [client.receive(0, version, cid).responses[0].partition_responses[0].error_code
                  for cid in range(500)]            # receive checks each correlation id in turn
        time.sleep(0.3)
        tracer.terminate()
        tracer.wait(10)
        tracer.stderr.close()
    assert errors == [0] * 500
    with open(trace) as f:
        sends = sum(1 for line in f if re.search(r"\b(sendto|sendmsg|writev?)\(", line))
    assert 0 < sends < 100, sends
