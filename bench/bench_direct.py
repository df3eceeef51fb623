"""O_DIRECT appends (pylog.io.direct) beside fio's O_DIRECT writes and pylog's buffered mode.

For each workload (batch size x partitions x flush policy) in the same run, on the
same filesystem, from the same memory state (``warm``: the previous repetition's files
are deleted right before each timed run; ``cold``: caches dropped and 6 s idle first):

- **pylog direct**: ``Log.append`` of one pre-encoded batch (1 MiB or 64 KiB of 1 KiB
  records), again and again, with ``pylog.io.direct = true`` on the io_uring engine
  (``pylog.io.direct.queue.depth`` = 1: each append is one write request).
- **pylog buffered**: the same appends through the page cache (pylog's default).
- **fio direct**: ``--direct=1 --ioengine=io_uring --bs=<batch rounded up to the O_DIRECT
  block>`` with ``--iodepth=1``
  (one append at a time, as a Log appends: the limit pylog's row is compared with) and
  ``--iodepth=4`` (several writes in flight: what the disk gives a deeper queue).
- **fio buffered**: ``--ioengine=psync`` at the same block size.

Partitions: 1, or 8 Logs appended round-robin from one thread (fio: ``--nrfiles=8``,
round robin). Flush: none, 16MiB (flush.messages = the records of ~16 MiB per
partition; fio ``--fdatasync`` every 16 MiB of blocks), batch (fdatasync every append).
MB/s counts batch bytes (MB = 10**6 B). Ratios: pylog direct / fio direct qd1, and
pylog direct / pylog buffered.

usage: python bench/bench_direct.py [--quick] [--dir DIR] [--memory warm|cold] [--markdown]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc  # noqa: E402
from storage_common import MB, MiB  # noqa: E402

import pylog  # noqa: E402
from pylog._core.engine import direct_alignment  # noqa: E402
from pylog.record import encode_batch  # noqa: E402

TIMESTAMP = 1_763_856_000_000
FLUSH_BYTES = 16 * MiB
RECORD = 1024


def make_batch(target: int) -> tuple[bytes, int]:
    """A batch of incompressible 1 KiB records just below `target` bytes: (bytes, records)."""
    rng = random.Random(target)
    n = target // (RECORD + 16)
    while True:
        data = encode_batch([rng.randbytes(RECORD) for _ in range(n)], timestamps=TIMESTAMP)
        if len(data) <= target:
            return data, n
        n -= 1


class Workload:
    def __init__(self, batch: int, partitions: int, flush: str, volume: int):
        self.batch_label = "1 MiB" if batch == MiB else f"{batch // 1024} KiB"
        self.data, self.nrec = make_batch(batch)
        self.bsize = len(self.data)
        self.partitions = partitions
        self.flush = flush
        self.appends = max(1, volume // partitions // self.bsize)    # per partition
        self.total_bytes = self.appends * partitions * self.bsize
        self.sync_every = {"none": 0, "16MiB": max(1, round(FLUSH_BYTES / self.bsize)),
                           "batch": 1}[flush]


def pylog_once(root: str, w: Workload, direct: bool) -> float:
    cfg = {"pylog.io.engine": "io_uring", "pylog.io.direct": "true" if direct else "false",
           "segment.bytes": 2**31 - 1, "max.message.bytes": 2 * MiB}
    if w.sync_every:
        cfg["flush.messages"] = w.sync_every * w.nrec
    logs = [pylog.Log(os.path.join(root, f"bench-{p}"), cfg) for p in range(w.partitions)]
    appends = [log.append for log in logs]
    data = w.data
    t0 = time.perf_counter()
    for _ in range(w.appends):
        for append in appends:
            append(data)
    dt = time.perf_counter() - t0
    assert sum(log.log_end_offset for log in logs) == w.appends * w.partitions * w.nrec
    for log in logs:            # abandoned: close() would fsync what "none" never syncs
        log.abandon()
    del logs, appends
    gc.collect()
    return dt


def fio_args(w: Workload, target: str, engine: str, depth: int, align: int = 0) -> list[str]:
    """fio's rows; with `align` (O_DIRECT) the block is the batch rounded up to it."""
    bs = -(-w.bsize // align) * align if align else w.bsize
    size = w.appends * w.partitions * bs
    args = ["--rw=write", f"--bs={bs}", "--fallocate=none", "--invalidate=0",
            f"--ioengine={engine}", f"--iodepth={depth}", f"--direct={int(bool(align))}"]
    if w.partitions == 1:
        args += [f"--filename={os.path.join(target, 'fio.dat')}", f"--size={size}"]
    else:
        args += [f"--directory={target}", f"--nrfiles={w.partitions}",
                 "--file_service_type=roundrobin", f"--size={size}"]
    if w.sync_every:
        k = w.sync_every
        while w.partitions > 1 and k > 1 and k % w.partitions != 1:
            k += 1              # the synced file rotates, so each is synced every ~k writes
        args.append(f"--fdatasync={k}")
    return args


def best_of(state: str, reps: int, target: str, run) -> float:
    """Warm-up + `reps` timed runs, each after prepare(state); the best MB/s."""
    best = 0.0
    for i in range(reps + 1):
        sc.prepare(state, target)
        os.makedirs(target, exist_ok=True)
        mbps = run(target)
        if i > 0 or state == "cold":
            best = max(best, mbps)
    sc.remove(target)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB rows, one repetition")
    ap.add_argument("--dir", help="directory on the filesystem under test (default: a temp dir)")
    ap.add_argument("--memory", choices=("warm", "cold"), default="warm")
    ap.add_argument("--volume-mib", type=int, default=None, help="bytes per row (default 1024)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--batches", default="1MiB,64KiB", help="comma list of 1MiB,64KiB")
    ap.add_argument("--partitions", default="1,8", help="comma list of partition counts")
    ap.add_argument("--flush", default="none,16MiB,batch", help="comma list of none,16MiB,batch")
    ap.add_argument("--json", help="append one JSON line per row to this file")
    args = ap.parse_args()
    volume = (args.volume_mib or (256 if args.quick else 1024)) * MiB
    reps = args.reps or (1 if args.quick else 2)
    base = tempfile.mkdtemp(prefix="pylog-bench-direct-", dir=args.dir or "/var/tmp")
    target = os.path.join(base, "t")
    try:
        probe = os.path.join(base, "probe")
        open(probe, "wb").close()
        with open(probe, "rb") as f:
            align = direct_alignment(f.fileno())
        os.unlink(probe)
        print("\n".join(sc.setup_block(base, {
            "memory state": args.memory, "volume per row": f"{volume // MiB} MiB",
            "O_DIRECT block": f"{align} B", "repetitions": f"best of {reps}"})))
        rows = []
        batches = [{"1MiB": MiB, "64KiB": 64 * 1024}[b] for b in args.batches.split(",")]
        for batch in batches:
            for partitions in [int(p) for p in args.partitions.split(",")]:
                for flush in args.flush.split(","):
                    if flush == "batch" and batch == 64 * 1024 and partitions == 8 and args.quick:
                        continue
                    w = Workload(batch, partitions, flush, volume)
                    mbps = lambda dt: w.total_bytes / dt / MB  # noqa: E731
                    direct = best_of(args.memory, reps, target,
                                     lambda t: mbps(pylog_once(t, w, True)))
                    buffered = best_of(args.memory, reps, target,
                                       lambda t: mbps(pylog_once(t, w, False)))
                    fio_d1 = best_of(args.memory, reps, target, lambda t: sc.fio(
                        fio_args(w, t, "io_uring", 1, align))["MBps"])
                    fio_d4 = best_of(args.memory, reps, target, lambda t: sc.fio(
                        fio_args(w, t, "io_uring", 4, align))["MBps"])
                    fio_b = best_of(args.memory, reps, target, lambda t: sc.fio(
                        fio_args(w, t, "psync", 1))["MBps"])
                    row = [w.batch_label, str(partitions), flush, direct, fio_d1,
                           f"{direct / fio_d1:.2f}x", fio_d4, buffered, f"{direct / buffered:.2f}x",
                           fio_b]
                    rows.append(row)
                    sc.log(" ".join(str(c if isinstance(c, str) else round(c)) for c in row))
                    sc.emit_json(args.json, {
                        "bench": "direct", "batch": w.bsize, "partitions": partitions,
                        "flush": flush, "memory": args.memory, "pylog_direct_MBps": direct,
                        "fio_direct_qd1_MBps": fio_d1, "fio_direct_qd4_MBps": fio_d4,
                        "pylog_buffered_MBps": buffered, "fio_buffered_MBps": fio_b})
        print()
        print(sc.table(["batch", "partitions", "flush", "pylog direct MB/s", "fio direct qd1",
                        "vs fio", "fio direct qd4", "pylog buffered", "direct vs buffered",
                        "fio buffered"], rows, args.markdown))
    finally:
        sc.remove(base)


if __name__ == "__main__":
    main()
