"""Threads or asyncio for the broker's network layer: the same request handling in both
models, measured with 1 to 256 concurrent connections, each sending small requests back
to back (the broker's hardest case: per-request overhead, not bytes).

    .venv/bin/python bench/bench_concurrency_model.py [--markdown] [--seconds 3]

Each server decodes every request with pylog's generated codec and answers a Metadata
request for one topic with the broker's own handler, against a real store: only the
connection handling differs. "event loop" is pylog.Broker as shipped; "threads" is the
thread-per-connection model it replaced, kept here as the measured alternative. The clients run in another process (raw sockets,
pre-encoded requests, one thread per connection).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import render  # noqa: E402

import pylog  # noqa: E402
from pylog.protocol import decode_request, encode_request, frame_response  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402

_i32 = struct.Struct(">i")


def _store_and_broker(root):
    store = pylog.open(root)
    store.create_topic("t", 1)
    broker = pylog.Broker(store, listen="127.0.0.1:0")
    return store, broker


def serve_broker(root, port_q, stop):
    """The broker as shipped: pylog.Broker (one event loop thread, pools for blocking work)."""
    store, broker = _store_and_broker(root)
    broker.start()
    port_q.put(broker.address[1])
    stop.wait()
    broker.shutdown()
    store.close()


def serve_threads(root, port_q, stop):
    """The model pylog first shipped: a thread per connection, blocking sockets, the
    same decode, handler and encode."""
    from pylog.broker.server import HANDLERS
    store, broker = _store_and_broker(root)

    class Conn:
        host = "127.0.0.1"

        def close(self):
            pass

    def recv_exact(sock, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def serve_one(sock):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn()
        try:
            while True:
                frame = recv_exact(sock, _i32.unpack(recv_exact(sock, 4))[0])
                header, body, _ = decode_request(frame)
                parts = frame_response(header, HANDLERS[header.api_key](broker, conn, header, body))
                sock.sendall(b"".join(bytes(p) for p in parts))
        except (ConnectionError, OSError):
            sock.close()

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(512)
    port_q.put(listener.getsockname()[1])

    def accept():
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(sock,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    stop.wait()
    listener.close()
    store.close()


def client(port, connections, seconds, out):
    request = encode_request(3, 9, 1, "bench", m.MetadataRequest(
        topics=[m.MetadataRequestMetadataRequestTopic(name="t")], allow_auto_topic_creation=False))
    counts = [0] * connections
    start = threading.Barrier(connections + 1)
    stop = time.monotonic() + seconds + 0.5

    def run(i):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 16)
        start.wait()
        t_end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < t_end:
            s.sendall(request)
            got = 0
            while got < 4:
                got += s.recv_into(memoryview(buf)[got:4])
            size = _i32.unpack_from(buf)[0] + 4
            while got < size:
                got += s.recv_into(memoryview(buf)[got:size])
            n += 1
        counts[i] = n
        s.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join(max(1.0, stop - time.monotonic() + 5))
    out.put(sum(counts) / seconds)


def measure(server, connections, seconds):
    root = tempfile.mkdtemp(prefix="pylog-bench-cm-")
    port_q, stop = mp.Queue(), mp.Event()
    proc = mp.Process(target=server, args=(root, port_q, stop))
    proc.start()
    port = port_q.get(timeout=30)
    out = mp.Queue()
    cl = mp.Process(target=client, args=(port, connections, seconds, out))
    cl.start()
    rate = out.get(timeout=seconds * 10 + 60)
    cl.join()
    stop.set()
    proc.join(30)
    return rate


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    rows = []
    for n in (1, 8, 64, 256):
        t = measure(serve_threads, n, args.seconds)
        a = measure(serve_broker, n, args.seconds)
        rows.append([str(n), f"{t:,.0f}", f"{a:,.0f}", f"{a / t:.2f}"])
    print(render("Metadata requests/s: thread per connection vs the broker's event loop (same handlers)",
                 ["connections", "threads req/s", "event loop req/s", "loop / threads"], rows,
                 args.markdown, ["uvloop is not installed here; it would speed up asyncio's "
                                 "loop, not the handlers (most of the time per request)"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
