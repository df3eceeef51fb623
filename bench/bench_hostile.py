"""What one hostile client costs `pylog serve`, and what the others see meanwhile.

    .venv/bin/python bench/bench_hostile.py              # every scenario (~2-4 min)
    .venv/bin/python bench/bench_hostile.py --only bomb-zstd,metadata-2m
    .venv/bin/python bench/bench_hostile.py --markdown   # the table for bench/RESULTS.md
    .venv/bin/python bench/bench_hostile.py --sasl       # a SASL_PLAINTEXT listener: every
                                                         # hostile request before authenticating

Each scenario starts a fresh `pylog serve` child (tests/broker/process.py), lets a
well-behaved client run small Metadata round trips on its own connection, resets the
broker's peak RSS (``/proc/PID/clear_refs``: 5), sends the hostile request(s), and
reports:

- the broker's peak RSS growth (VmHWM after minus VmRSS before), beside
  ``message.max.bytes``: the issue's target is a small multiple of it;
- the stall the well-behaved client saw (its slowest round trip in the window), beside
  its slowest round trip over a quiet window of the same length before: the target is
  under 100 ms;
- the broker's peak thread count during the scenario, beside its count before: no
  thread per connection or per parked request;
- the answer the hostile client got, and, where it matters, how long a well-behaved
  consumer group took to form meanwhile.

With ``--sasl`` the broker listens with SASL_PLAINTEXT (SCRAM-SHA-512); the well-behaved
clients authenticate, the hostile ones send their requests without authenticating (the
security issue's pre-authentication fuzzing: what an unauthenticated client costs).

Scenarios (the issue's "A broker that survives its clients", items 1-3):
  bomb-gzip     a 1 MB gzip batch of zeros (~1 GB inflated) in one Produce request
  bomb-zstd     a 33 KB zstd batch of zeros (~1 GB inflated)
  bomb-lz4      a 1.1 MB lz4 batch of zeros (~0.28 GB inflated)
  bomb-snappy   a 97-byte xerial snappy batch whose two blocks claim 1 GiB each
  metadata-2m   a 4 MB Metadata v1 request naming 2 million empty topic names
  fetch-noread  1,030 connections each send a Fetch of 8 MiB and never read the answer;
                then a fresh group of one member joins and syncs
  joins-parked  1,100 JoinGroups parked in one group; then an unrelated group joins and syncs
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from report import render  # noqa: E402

import pylog  # noqa: E402
from pylog.protocol import encode_request  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402
from pylog.protocol.client import ProtocolClient  # noqa: E402

MESSAGE_MAX_BYTES = 1048588          # Kafka's default message.max.bytes
_i32 = struct.Struct(">i")


# ================================================================ the broker

#: The well-behaved clients' SASL login (--sasl), None on a PLAINTEXT listener.
LOGIN = None


def start_broker(log_dir: str):
    from broker.process import ServeProcess
    if LOGIN is None:
        return ServeProcess(log_dir, "group.initial.rebalance.delay.ms=0")
    from pylog.common import scram
    with pylog.open(log_dir) as store:
        mech = scram.MECHANISMS[LOGIN.mechanism]
        store.alter_user_scram_credentials(upsertions=[(LOGIN.username, mech.name,
                                                        scram.new_credential(mech, LOGIN.password))])
    return ServeProcess(log_dir, "group.initial.rebalance.delay.ms=0",
                        f"sasl.enabled.mechanisms={LOGIN.mechanism}",
                        listen="SASL_PLAINTEXT://127.0.0.1:0")


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


class Probe(threading.Thread):
    """A well-behaved client: Metadata round trips of one topic on its own connection,
    as fast as they answer; also samples the broker's thread count."""

    def __init__(self, bootstrap: str, topic: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.client = ProtocolClient(bootstrap, client_id="probe", timeout=120, authenticate=LOGIN)
        self.topic = topic
        self.pid = pid
        self.samples: list[tuple[float, float]] = []       # (start, seconds)
        self.threads_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.client.metadata([self.topic])
            self.samples.append((t0, time.monotonic() - t0))
            try:
                self.threads_peak = max(self.threads_peak, proc_status(self.pid, "Threads"))
            except (OSError, KeyError):
                return
            time.sleep(0.002)

    def worst(self, since: float, until: float) -> float:
        """The slowest round trip that overlapped [since, until] (an unfinished one counts
        up to now)."""
        worst = max((d for t, d in self.samples if t + d >= since and t <= until), default=0.0)
        if self.samples:
            last_end = self.samples[-1][0] + self.samples[-1][1]
            if not self.stop.is_set() and self.is_alive():
                worst = max(worst, time.monotonic() - last_end)
        return worst


# ========================================================== hostile bytes

def batch(codec: int, records_section: bytes, count: int) -> bytes:
    """A v2 record batch (docs/FORMAT.md section 4) around a given records section."""
    body = struct.pack(">hiqqqhii", codec, count - 1, 0, 0, -1, -1, -1, count) + records_section
    crc = pylog.crc32c(body)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(body), 0, 2, crc)
    return head + body


def produce_frame(topic: str, records: bytes, acks: int = 1) -> bytes:
    """A whole Produce v7 request frame, size prefix included."""
    req = m.ProduceRequest(acks=acks, timeout_ms=30000, topic_data=[m.ProduceRequestTopicProduceData(
        name=topic, partition_data=[m.ProduceRequestPartitionProduceData(index=0, records=records)])])
    return encode_request(0, 7, 1, "hostile", req)


def bomb(codec_name: str) -> bytes:
    from pylog import compression as c
    if codec_name == "gzip":
        import gzip
        section = gzip.compress(bytes(1 << 30), compresslevel=9, mtime=0)     # ~1 MB
        return batch(c.GZIP, section, 1)
    if codec_name == "zstd":
        import zstandard
        section = zstandard.ZstdCompressor(level=19).compress(bytes(1 << 30))   # ~33 KB
        return batch(c.ZSTD, section, 1)
    if codec_name == "lz4":
        import lz4.frame
        section = lz4.frame.compress(bytes(280 << 20), compression_level=12)   # ~1.1 MB
        return batch(c.LZ4, section, 1)
    if codec_name == "snappy":
        # Two raw blocks that claim 1 GiB each (varint 2^30) and hold 4 literal bytes.
        block = b"\x80\x80\x80\x80\x04" + b"\x0c" + b"abcd"
        section = c.XERIAL_MAGIC + struct.pack(">ii", 1, 1) + (_i32.pack(len(block)) + block) * 2
        return batch(c.SNAPPY, section, 1)
    raise ValueError(codec_name)


def metadata_2m_frame() -> bytes:
    count = 2_000_000
    header = struct.pack(">hhih", 3, 1, 1, 7) + b"hostile"
    body = _i32.pack(count) + b"\x00\x00" * count            # 2 M empty topic names
    return header + body


def framed(payload: bytes) -> bytes:
    return _i32.pack(len(payload)) + payload


def read_answer(sock: socket.socket, timeout: float = 120) -> bytes | None:
    sock.settimeout(timeout)
    try:
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        n = _i32.unpack(head)[0]
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(1 << 20, n - len(buf)))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)
    except OSError:
        return None


def produce_error(answer: bytes | None) -> str:
    if answer is None:
        return "connection closed"
    from pylog.protocol.api import decode_response
    _, resp = decode_response(0, 7, answer)
    p = resp.responses[0].partition_responses[0]
    return f"error {p.error_code}"


def group_forms(bootstrap: str, group: str, topic: str, timeout: float = 40) -> float:
    """Seconds for a one-member group to join and sync (JoinGroup v3: no member-id round);
    inf if it has not formed within `timeout`."""
    t0 = time.monotonic()
    try:
        return _group_forms(bootstrap, group, timeout, t0)
    except (TimeoutError, ConnectionError):
        return float("inf")


def _group_forms(bootstrap: str, group: str, timeout: float, t0: float) -> float:
    with ProtocolClient(bootstrap, client_id="probe-group", timeout=timeout, authenticate=LOGIN) as c:
        join = c.request(11, m.JoinGroupRequest(
            group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[m.JoinGroupRequestJoinGroupRequestProtocol(
                name="range", metadata=b"")]), version=3)
        if join.error_code:
            return float("nan")
        sync = c.request(14, m.SyncGroupRequest(group_id=group, generation_id=join.generation_id,
                                                member_id=join.member_id, assignments=[
            m.SyncGroupRequestSyncGroupRequestAssignment(member_id=join.member_id,
                                                         assignment=b"")]), version=2)
        if sync.error_code:
            return float("nan")
    return time.monotonic() - t0


# ============================================================== scenarios

def connect(address: tuple[str, int]) -> socket.socket:
    s = socket.create_connection(address)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def run_bomb(ctx, codec: str) -> dict:
    payload = produce_frame(ctx.topic, ctx.prepared)
    s = connect(ctx.address)
    s.sendall(payload)
    answer = read_answer(s)
    s.close()
    return {"answer": produce_error(answer), "sent": len(payload)}


def run_metadata_2m(ctx) -> dict:
    payload = framed(ctx.prepared)
    s = connect(ctx.address)
    s.sendall(payload)
    answer = read_answer(s)
    s.close()
    return {"answer": "connection closed" if answer is None else f"{len(answer)} B answer",
            "sent": len(payload)}


def run_fetch_noread(ctx, connections: int = 1030) -> dict:
    # 8 MiB of records to answer with, then fetchers that never read.
    with ProtocolClient(ctx.bootstrap, authenticate=LOGIN) as c:
        for _ in range(8):
            answer = c.produce(ctx.topic, 0, pylog.records.encode_batch([os.urandom(1 << 16)] * 15), acks=1)
            assert answer.error_code == 0, answer
    req = m.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20,
                         isolation_level=0, session_id=0, session_epoch=-1,
                         topics=[m.FetchRequestFetchTopic(topic=ctx.topic, partitions=[
                             m.FetchRequestFetchPartition(partition=0, fetch_offset=0,
                                                          partition_max_bytes=8 << 20,
                                                          current_leader_epoch=-1,
                                                          log_start_offset=-1)])])
    payload = encode_request(1, 11, 1, "noread", req)
    socks = []
    for _ in range(connections):
        s = connect(ctx.address)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(payload)
        socks.append(s)
    time.sleep(1.0)
    formed = group_forms(ctx.bootstrap, "well-behaved-after-noread", ctx.topic)
    for s in socks:
        s.close()
    return {"answer": f"a group formed in {formed:.2f} s" if formed < float("inf") else
            "a group did not form in 40 s", "sent": len(payload) * connections,
            "formed": formed}


def run_joins_parked(ctx, joiners: int = 1100) -> dict:
    proto = [m.JoinGroupRequestJoinGroupRequestProtocol(name="range", metadata=b"")]

    def join_frame(i: int) -> bytes:
        return encode_request(11, 3, i, "parked", m.JoinGroupRequest(
            group_id="crowded", session_timeout_ms=60000, rebalance_timeout_ms=60000, member_id="",
            protocol_type="consumer", protocols=proto))

    first = connect(ctx.address)          # the first member completes a generation ...
    first.sendall(join_frame(0))
    read_answer(first)
    socks = [first]
    for i in range(joiners):              # ... and every later join waits for it to rejoin
        s = connect(ctx.address)
        s.sendall(join_frame(i + 1))
        socks.append(s)
    time.sleep(1.0)
    formed = group_forms(ctx.bootstrap, "unrelated", ctx.topic)
    for s in socks:
        s.close()
    return {"answer": f"an unrelated group formed in {formed:.2f} s" if formed < float("inf") else
            "an unrelated group did not form in 40 s", "sent": joiners, "formed": formed}


SCENARIOS = {
    "bomb-gzip": lambda ctx: run_bomb(ctx, "gzip"),
    "bomb-zstd": lambda ctx: run_bomb(ctx, "zstd"),
    "bomb-lz4": lambda ctx: run_bomb(ctx, "lz4"),
    "bomb-snappy": lambda ctx: run_bomb(ctx, "snappy"),
    "metadata-2m": run_metadata_2m,
    "fetch-noread": run_fetch_noread,
    "joins-parked": run_joins_parked,
}


#: What a scenario builds before its window opens (not timed, not the broker's cost).
PREPARE = {
    "bomb-gzip": lambda: bomb("gzip"),
    "bomb-zstd": lambda: bomb("zstd"),
    "bomb-lz4": lambda: bomb("lz4"),
    "bomb-snappy": lambda: bomb("snappy"),
    "metadata-2m": metadata_2m_frame,
}


class Context:
    def __init__(self, broker, topic: str, prepared) -> None:
        self.broker = broker
        self.prepared = prepared
        self.bootstrap = broker.bootstrap
        host, port = broker.bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.topic = topic


def measure(name: str, quiet_s: float = 1.0) -> dict:
    prepared = PREPARE.get(name, lambda: None)()
    with tempfile.TemporaryDirectory(prefix="pylog-hostile-") as tmp:
        broker = start_broker(tmp)
        try:
            topic = "probe"
            with ProtocolClient(broker.bootstrap, authenticate=LOGIN) as c:
                c.metadata([topic], allow_auto_create=True)
            probe = Probe(broker.bootstrap, topic, broker.pid)
            probe.start()
            time.sleep(0.3)
            q0 = time.monotonic()
            time.sleep(quiet_s)
            quiet = probe.worst(q0, time.monotonic())
            threads_before = proc_status(broker.pid, "Threads")
            probe.threads_peak = threads_before
            rss_before = proc_status(broker.pid, "VmRSS")
            reset_peak_rss(broker.pid)
            t0 = time.monotonic()
            result = SCENARIOS[name](Context(broker, topic, prepared))
            t1 = time.monotonic()
            time.sleep(0.2)
            stall = probe.worst(t0, t1)
            peak = proc_status(broker.pid, "VmHWM")
            probe.stop.set()
            probe.join(30)
            alive = broker.alive()
        finally:
            broker.stop()
    result.update(name=name, quiet=quiet, stall=stall, rss_growth=(peak - rss_before) * 1024,
                  threads_before=threads_before, threads_peak=probe.threads_peak, alive=alive,
                  seconds=t1 - t0)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated scenario names")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--sasl", action="store_true",
                    help="SASL_PLAINTEXT listener; the hostile requests come before authenticating")
    args = ap.parse_args()
    if args.sasl:
        global LOGIN
        from pylog.remote.sasl import SaslLogin
        LOGIN = SaslLogin("SCRAM-SHA-512", "probe", "probe-secret")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))     # 1,100 connections each side
    names = args.only.split(",") if args.only else list(SCENARIOS)
    rows = []
    for name in names:
        r = measure(name)
        rows.append([
            r["name"], r["answer"],
            f"{r['rss_growth'] / 2**20:.0f}", f"{r['rss_growth'] / MESSAGE_MAX_BYTES:.1f}x",
            f"{r['stall'] * 1000:.0f}", f"{r['quiet'] * 1000:.1f}",
            f"{r['threads_before']} -> {r['threads_peak']}",
            f"{r['seconds']:.1f}", "yes" if r["alive"] else "**no**",
        ])
        print(f"{name}: done", file=sys.stderr, flush=True)
    print(render(
        "One hostile client against pylog serve (fresh broker per scenario)"
        + (", SASL_PLAINTEXT listener, hostile requests before authenticating" if args.sasl else ""),
        ["scenario", "hostile client got", "peak RSS growth MiB", "x message.max.bytes",
         "other client's worst round trip ms", "same, quiet window ms", "broker threads",
         "scenario s", "broker alive"], rows, args.markdown,
        notes=["targets: RSS growth a small multiple of message.max.bytes (1 MiB); the other "
               "client's worst round trip under 100 ms; no thread per connection or parked request",
               f"machine: {os.cpu_count()} CPUs; pylog {pylog.__version__ if hasattr(pylog, '__version__') else ''}"]))


if __name__ == "__main__":
    main()
