"""The broker's listener: the backlog it asks the kernel for, and what it does when the
process runs out of file descriptors (a real ``pylog serve`` under a low ``ulimit -n``)."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import time

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess, wait_until


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on `port`: ss prints it as Send-Q."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    return int(out[2])


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss (iproute2) is not installed")
@pytest.mark.parametrize("asked", [None, 1000])
def test_the_listen_backlog_is_socket_listen_backlog_size(tmp_path, asked):
    """asyncio's server called listen() again with its own 100; the broker's listener
    keeps the backlog it was given (512 by default; Kafka's socket.listen.backlog.size)."""
    config = {} if asked is None else {"socket.listen.backlog.size": asked}
    with pylog.open(tmp_path) as store, pylog.Broker(store, listen="127.0.0.1:0", config=config) as broker:
        with open("/proc/sys/net/core/somaxconn") as f:
            somaxconn = int(f.read())
        assert listen_backlog(broker.address[1]) == min(asked or 512, somaxconn)
        with ProtocolClient(broker.bootstrap_servers) as client:
            assert client.metadata().brokers


FD_LIMIT = 64


def low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_out_of_file_descriptors_the_broker_pauses_accepting_and_logs_once(tmp_path):
    """Under ulimit -n 64, 100 clients connect and stay: the broker serves those it has
    fds for, leaves the rest waiting in the backlog, and logs one line about it (asyncio's
    server logged a traceback per failed accept, hundreds per loop pass). When clients
    leave, the waiting ones are accepted and served."""
    with ServeProcess(str(tmp_path), preexec_fn=low_fd_limit) as broker:
        host, port = broker.bootstrap.split(":")
        clients = []
        try:
            for _ in range(100):
                clients.append(socket.create_connection((host, int(port)), timeout=30))
            assert wait_until(lambda: any("accepting connections failed" in line
                                          for line in broker.log_lines()), 30)
            time.sleep(1)       # accept fails again every 100 ms (ACCEPT_PAUSE_S) meanwhile
            open_fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
            assert open_fds <= FD_LIMIT
            lines = broker.log_lines()
            assert len("\n".join(lines)) < 5000, lines[:20]
            failed = [line for line in lines if "accepting connections failed" in line]
            assert len(failed) == 1, lines[:20]
            assert "Too many open files" in failed[0] and "raise ulimit -n" in failed[0]
            # The first connections are served meanwhile.
            request = m.ApiVersionsRequest(client_software_name="p", client_software_version="1")
            first = clients[0]
            first.sendall(_frame(18, 3, 1, request))
            assert _read_frame(first)
            # Clients leave: the ones waiting in the backlog are accepted and served.
            for s in clients[:60]:
                s.close()
            last = clients[-1]
            last.sendall(_frame(18, 3, 2, request))
            assert _read_frame(last)
        finally:
            for s in clients:
                s.close()
        assert wait_until(lambda: len(os.listdir(f"/proc/{broker.pid}/fd")) < FD_LIMIT - 30)
        with ProtocolClient(broker.bootstrap) as client:
            assert client.metadata().brokers
    assert "Traceback" not in broker.stderr


def _frame(key: int, version: int, correlation_id: int, body) -> bytes:
    from pylog.protocol import encode_request
    return encode_request(key, version, correlation_id, "p", body)


def _read_frame(s: socket.socket) -> bytes:
    s.settimeout(30)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        assert chunk, "closed"
        head += chunk
    size = int.from_bytes(head, "big")
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        assert chunk, "closed"
        data += chunk
    return data


def test_a_burst_of_connections_is_taken_a_bounded_number_per_loop_pass(tmp_path):
    """200 connections waiting in the backlog at once are taken at most
    NEW_CONNECTIONS_PER_PASS per pass of the event loop (Kafka's Processor: 20 per poll),
    so the passes between them serve the open connections. Counted per pass by a
    callback that re-queues itself (it runs once a pass), not timed."""
    from pylog.broker.server import NEW_CONNECTIONS_PER_PASS
    burst = 200
    with pylog.open(tmp_path) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        taken: list[int] = []

        def sample() -> None:
            taken.append(broker.stats["connections.accepted"])
            if len(taken) < 100_000 and taken[-1] < burst:
                broker.loop.call_soon(sample)

        # The listener stops being the loop's reader meanwhile: the whole burst waits in
        # the kernel's backlog before the first accept.
        broker.loop.call_soon_threadsafe(broker._stop_accepting)
        assert wait_until(lambda: not broker._accepting), "accepting paused"
        clients = [socket.create_connection(broker.address) for _ in range(burst)]
        try:
            def resume() -> None:
                broker._start_accepting()
                broker.loop.call_soon(sample)
            broker.loop.call_soon_threadsafe(resume)
            assert wait_until(lambda: broker.connection_count == burst, timeout=60), \
                f"{broker.connection_count} of {burst} connections taken"
            steps = [b - a for a, b in zip(taken, taken[1:])]
            assert max(steps) <= NEW_CONNECTIONS_PER_PASS, steps
            assert sum(steps) + taken[0] == burst
        finally:
            for c in clients:
                c.close()
