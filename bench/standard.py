#!/usr/bin/env python3
"""pylog's standard benchmark (the README's first command, `tools/run-benchmark`): one
table, in under two minutes, of the figures users ask first, each beside this
machine's own limit measured in the same run and beside the naive alternative.

Everything runs on an embedded default: a temporary log dir under /tmp, removed at the
end. Rows (100-byte values unless said; MB = 10**6 B):

| row | pylog | the limit (same run) | the naive alternative |
|---|---|---|---|
| CRC-32C of 1 MiB buffers | pylog.crc32c | memory copy of 1 MiB buffers (numpy.copyto) | the `crc32c` package if installed |
| encode 1,000 records from a list | records.encode_batch | memory copy, buffers of a batch's size, as records/s | a struct.pack loop into a bytearray (no CRC) |
| decode to Arrow | records.decode_arrow | the same copy, as records/s | a struct.unpack loop over that bytearray |
| append 1 MiB batches | Log.append (pre-encoded) | os.write loop of the same bytes | the bytearray framing + one write per batch |
| append 22 KB batches (200 records) | Log.append | os.write loop | bytearray framing |
| send() keyed, Kafka's defaults | Producer.send + flush | raw append of the same records | bytearray framing |
| send_batch 10,000 a call, acks=1 | Producer.send_batch + flush | raw append of the same batches | bytearray framing |
| consume with poll_arrow | Consumer.poll_arrow | Log.read + decode_arrow of the same batches | a read + struct.unpack loop |
| zero-copy fetch to a socket | FileSlice.send_to (sendfile) | os.sendfile of the same file range | read + send |

Each cell is the best of --repeat trials (default 2) after a warm-up; the
previous trial's files are deleted just before the next ("warm" memory state, see
bench/RESULTS.md). ``--json`` prints one JSON line per row.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc  # noqa: E402

import pylog  # noqa: E402
from pylog import records  # noqa: E402

NAIVE = struct.Struct(">iq")
VALUE = 100


def best(fn, repeat: int) -> float:
    """Seconds of the best of `repeat` timed calls after one warm-up."""
    fn()
    return min(fn() for _ in range(repeat))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def loop(fn, n: int):
    """fn() n times, keeping no result (a list of outputs would time page faults)."""
    def run():
        for _ in range(n):
            fn()
    return run


class Bench:
    def __init__(self, base: str, repeat: int, scale: float):
        self.base = base
        self.repeat = repeat
        self.scale = scale
        rng = np.random.default_rng(7)
        pool = [rng.bytes(VALUE) for _ in range(1000)]
        self.values = pool
        self.keys = [b"user-%d" % i for i in range(1000)]
        self.batch_1000 = records.encode_batch(pool)
        self.rows: list[dict] = []
        self._n = 0

    def fresh(self) -> str:
        self._n += 1
        path = os.path.join(self.base, f"t{self._n}")
        shutil.rmtree(os.path.join(self.base, f"t{self._n - 1}"), ignore_errors=True)
        return path

    def row(self, name: str, unit: str, pylog_rate: float, limit_name: str, limit: float,
            naive_name: str, naive: float | None) -> None:
        self.rows.append({"row": name, "unit": unit, "pylog": pylog_rate, "limit_name": limit_name,
                          "limit": limit, "x_limit": pylog_rate / limit if limit else None,
                          "naive_name": naive_name, "naive": naive,
                          "x_naive": pylog_rate / naive if naive else None})
        sc.log(f"  {name}: {pylog_rate:,.2f} {unit}")

    # ------------------------------------------------------------------ rows

    def memcpy_gbs(self, nbytes: int, total: int = 256 << 20) -> float:
        """Memory copy bandwidth in buffers of `nbytes` (the size the row works on, so the
        copy sees the same caches)."""
        src = np.ones(nbytes, dtype=np.uint8)
        dst = np.empty_like(src)
        k = max(1, total // nbytes)
        return k * nbytes / best(lambda: timed(lambda: [np.copyto(dst, src) for _ in range(k)]),
                                 self.repeat + 1) / 1e9

    def crc(self) -> None:
        buf = np.random.default_rng(1).bytes(1 << 20)
        memcpy = self.memcpy_gbs(len(buf))
        n = int(400 * self.scale)
        t = best(lambda: timed(loop(lambda: pylog.crc32c(buf), n)), self.repeat)
        naive = None
        try:
            import crc32c as peer
            tp = best(lambda: timed(loop(lambda: peer.crc32c(buf), n)), self.repeat)
            naive = n * len(buf) / tp / 1e9
        except ImportError:
            pass
        self.row("CRC-32C, 1 MiB buffers", "GB/s", n * len(buf) / t / 1e9, "memory copy", memcpy,
                 "crc32c package", naive)

    def codec(self) -> None:
        values = self.values
        memcpy = self.memcpy_gbs(len(self.batch_1000))
        n = int(300 * self.scale)
        t = best(lambda: timed(loop(lambda: records.encode_batch(values), n)), self.repeat)
        rate = n * len(values) / t / 1e6

        def naive_encode():
            for _ in range(n):
                ba = bytearray()
                for i, v in enumerate(values):
                    ba += NAIVE.pack(len(v), i)
                    ba += v
        tn = best(lambda: timed(naive_encode), self.repeat)
        copy_rate = memcpy * 1e9 / VALUE / 1e6        # records/s a memory copy would move
        self.row("encode 1,000 records of 100 B from a list", "M rec/s", rate, "memory copy",
                 copy_rate, "struct.pack loop", n * len(values) / tn / 1e6)
        buf = b"".join([self.batch_1000] * 50)
        m = int(20 * self.scale)
        td = best(lambda: timed(loop(lambda: records.decode_arrow(buf), m)), self.repeat)
        framed = bytearray()
        for i, v in enumerate(values * 50):
            framed += NAIVE.pack(len(v), i)
            framed += v
        framed = bytes(framed)

        def naive_decode():
            for _ in range(m):
                pos, out = 0, []
                unpack = NAIVE.unpack_from
                while pos < len(framed):
                    length, _ = unpack(framed, pos)
                    out.append(framed[pos + 12:pos + 12 + length])
                    pos += 12 + length
        tnd = best(lambda: timed(naive_decode), self.repeat)
        self.row("decode_arrow, 100 B records", "M rec/s", m * 50_000 / td / 1e6, "memory copy",
                 memcpy * 1e9 / (len(buf) / 50_000) / 1e6, "struct.unpack loop",
                 m * 50_000 / tnd / 1e6)

    def _append_trial(self, batch: bytes, count: int) -> float:
        path = self.fresh()
        log = pylog.Log(os.path.join(path, "t-0"), {"segment.bytes": 1 << 30})
        append = log.append
        t = timed(loop(lambda: append(batch), count))
        log.abandon()                               # no close(): it would fsync
        return t

    def _write_trial(self, batch: bytes, count: int) -> float:
        path = self.fresh()
        os.makedirs(path)
        fd = os.open(os.path.join(path, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        t = timed(loop(lambda: os.write(fd, batch), count))
        os.close(fd)
        return t

    def _naive_trial(self, values: list[bytes], count: int) -> float:
        path = self.fresh()
        os.makedirs(path)

        def run():
            with open(os.path.join(path, "f"), "wb", buffering=0) as f:
                off = 0
                for _ in range(count):
                    ba = bytearray()
                    for v in values:
                        ba += NAIVE.pack(len(v), off)
                        ba += v
                        off += 1
                    f.write(ba)
        return timed(run)

    def append(self) -> None:
        for label, nrec in (("append 1 MiB batches (pre-encoded)", 9_000),
                            ("append 22 KB batches (200 records)", 200)):
            values = (self.values * 10)[:nrec]
            batch = records.encode_batch(values)
            count = max(1, int((256 << 20) * self.scale) // len(batch))
            naive_count = max(1, int((32 << 20) * self.scale) // len(batch))
            tp = best(lambda: self._append_trial(batch, count), self.repeat)
            tw = best(lambda: self._write_trial(batch, count), self.repeat)
            tn = best(lambda: self._naive_trial(values, naive_count), self.repeat)
            mb = len(batch) / 1e6
            self.row(label, "MB/s", count * mb / tp, "os.write loop", count * mb / tw,
                     "framed bytearray + write", naive_count * mb / tn)

    def _producer_trial(self, config: dict, mode: str, n: int) -> float:
        path = self.fresh()
        with pylog.open([path], background=False) as store:
            store.create_topic("t", 8)
            with pylog.Producer(store, config) as producer:
                producer.partitions_for("t")
                values, keys = self.values, self.keys
                t0 = time.perf_counter()
                if mode == "send":
                    send = producer.send
                    for i in range(n):
                        send("t", values[i % 1000], keys[i % 1000])
                else:
                    chunk_v = (values * 10)[:10_000]
                    chunk_k = (keys * 10)[:10_000]
                    for _ in range(n // 10_000):
                        producer.send_batch("t", chunk_v, chunk_k)
                producer.flush()
                return time.perf_counter() - t0

    def _raw_partitioned(self, n: int, per_call: int) -> float:
        from pylog.client.partitioner import partition_keys
        keys = (self.keys * (per_call // 1000 + 1))[:per_call]
        values = (self.values * (per_call // 1000 + 1))[:per_call]
        parts = partition_keys(keys, 8)
        batches = [(p, records.encode_batch([values[i] for i in np.flatnonzero(parts == p)],
                                            [keys[i] for i in np.flatnonzero(parts == p)]))
                   for p in range(8) if (parts == p).any()]
        path = self.fresh()
        with pylog.open([path], background=False) as store:
            store.create_topic("t", 8)
            logs = [store.log("t", p) for p in range(8)]
            t0 = time.perf_counter()
            for _ in range(n // per_call):
                for p, b in batches:
                    logs[p].append(b)
            return time.perf_counter() - t0

    def producer(self) -> None:
        n = int(1_000_000 * self.scale)
        ts = best(lambda: self._producer_trial({}, "send", n), self.repeat)
        traw = best(lambda: self._raw_partitioned(n, 1000), self.repeat)
        tn = best(lambda: self._naive_trial(self.values, n // 1000), self.repeat)
        self.row("send() keyed, Kafka's defaults (acks=all, idempotent), incl. flush()",
                 "M rec/s", n / ts / 1e6, "raw append, same records", n / traw / 1e6,
                 "framed bytearray + write, no fsync", n / tn / 1e6)
        n = int(2_000_000 * self.scale) // 10_000 * 10_000 or 10_000
        tb = best(lambda: self._producer_trial({"acks": "1", "enable.idempotence": False},
                                               "send_batch", n), self.repeat)
        traw = best(lambda: self._raw_partitioned(n, 10_000), self.repeat)
        tn = best(lambda: self._naive_trial((self.values * 10)[:10_000], n // 10_000), self.repeat)
        self.row("send_batch 10,000 a call, acks=1, incl. flush()", "M rec/s", n / tb / 1e6,
                 "raw append, same batches", n / traw / 1e6, "framed bytearray + write",
                 n / tn / 1e6)

    def consumer(self) -> None:
        path = self.fresh()
        n = int(2_000_000 * self.scale)
        with pylog.open([path], background=False) as store:
            store.create_topic("t", 1)
            log = store.log("t", 0)
            for _ in range(n // 1000):
                log.append(self.batch_1000)

            def poll():
                with pylog.Consumer(store, enable_auto_commit=False,
                                    max_poll_records=100_000) as c:
                    c.assign([("t", 0)])
                    c.seek_to_beginning()
                    got = 0
                    while got < n:
                        b = c.poll_arrow(1.0)
                        got += b.num_rows if b is not None else 0
                    return got

            def raw():
                off = 0
                while off < n:
                    sl = log.read(off, 8 << 20)
                    records.decode_arrow(sl.read())
                    off = sl.last_offset + 1
            tp = best(lambda: timed(poll), self.repeat)
            tr = best(lambda: timed(raw), self.repeat)
            seg = log.segments[0].path
            size = os.path.getsize(seg)

            def naive():
                with open(seg, "rb") as f:
                    data = f.read()
                # A naive reader of Kafka's format in Python: walk batch headers, then each
                # record's varints (the per-record Python loop an application would write).
                pos = count = 0
                while pos + 61 <= len(data) and count < n:
                    length = int.from_bytes(data[pos + 8:pos + 12], "big")
                    nrec = int.from_bytes(data[pos + 57:pos + 61], "big")
                    p = pos + 61
                    for _ in range(nrec):
                        rlen, p = _varint(data, p)
                        p += rlen
                        count += 1
                    pos += 12 + length
            tn = best(lambda: timed(naive), self.repeat)
        self.row("consume with poll_arrow (1 partition)", "M rec/s", n / tp / 1e6,
                 "Log.read + decode_arrow", n / tr / 1e6, "read + a Python varint walk",
                 n / tn / 1e6)
        self._sendfile(seg, size)

    def _sendfile(self, seg: str, size: int) -> None:
        """FileSlice.send_to against raw os.sendfile and read+send, one socketpair reader."""
        from pylog.storage.file_slice import FileSlice  # noqa: F401 - the type send_to is on

        def receive(sock, total):
            buf = bytearray(1 << 20)
            got = 0
            while got < total:
                k = sock.recv_into(buf)
                if not k:
                    break
                got += k

        def over_socket(send):
            a, b = socket.socketpair()
            th = threading.Thread(target=receive, args=(b, size))
            th.start()
            t = timed(lambda: send(a))
            th.join()
            a.close()
            b.close()
            return t

        log = pylog.Log(os.path.dirname(seg), {"segment.bytes": 1 << 30})
        try:
            slices = []
            off = 0
            while True:
                sl = log.read(off, 8 << 20)
                if sl is None or not sl.size:
                    break
                slices.append(sl)
                off = sl.last_offset + 1
                if off >= log.log_end_offset:
                    break
            total = sum(s.size for s in slices)

            def pylog_send(sock):
                for s in slices:
                    s.send_to(sock)

            def raw_send(sock):
                with open(seg, "rb") as f:
                    pos = 0
                    while pos < total:
                        pos += os.sendfile(sock.fileno(), f.fileno(), pos, min(8 << 20, total - pos))

            def naive_send(sock):
                with open(seg, "rb") as f:
                    while chunk := f.read(1 << 20):
                        sock.sendall(chunk)
            tp = best(lambda: over_socket(pylog_send), self.repeat)
            tr = best(lambda: over_socket(raw_send), self.repeat)
            tn = best(lambda: over_socket(naive_send), self.repeat)
        finally:
            log.close()
        mb = total / 1e6
        self.row("zero-copy fetch to a socket (FileSlice.send_to)", "MB/s", mb / tp,
                 "os.sendfile, same range", mb / tr, "read + send", mb / tn)


def _varint(data: bytes, p: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="volume factor (0.2: a smoke run)")
    ap.add_argument("--dir", help="where the temporary log dir goes (default /tmp)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON line per row")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="pylog-standard-", dir=args.dir or "/tmp")
    started = time.monotonic()
    from pylog.common.memory import tune_malloc
    malloc = tune_malloc()          # as pylog serve and pylog perf run (pylog.common.memory)
    try:
        for line in sc.setup_block(base, {"repeat": f"warm-up + best of {args.repeat}",
                                          "malloc": malloc}):
            print(line)
        b = Bench(base, args.repeat, args.scale)
        b.crc()
        b.codec()
        b.append()
        b.producer()
        b.consumer()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        for r in b.rows:
            print(json.dumps(r))
        return 0
    table = [[r["row"], f"{r['pylog']:,.2f} {r['unit']}", f"{r['limit']:,.2f} ({r['limit_name']})",
              f"{r['x_limit']:.2f}x" if r["x_limit"] is not None else "",
              f"{r['naive']:,.2f} ({r['naive_name']})" if r["naive"] else "-",
              f"{r['x_naive']:.1f}x" if r["x_naive"] else ""] for r in b.rows]
    print()
    print(sc.table(["row", "pylog", "limit, same run", "x limit", "naive alternative",
                    "x naive"], table, args.markdown))
    print(f"\n{time.monotonic() - started:.0f} s. Other benchmarks: bench/ (bench/RESULTS.md); "
          "your disks: tuning/ (docs/TUNING.md); pylog perf for Kafka-style runs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
