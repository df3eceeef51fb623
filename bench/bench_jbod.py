#!/usr/bin/env python3
"""JBOD benchmark (issue 4): append throughput over 1, 2 and 4 log dirs, each
its own loop-mounted ext4 filesystem, against one.

For each N, N filesystem images are made under --dir (sparse files), mounted
with ``-o loop``, and a store is opened over them; a topic with 4 partitions
per dir is created (placement puts 4 on each dir), and one writer thread per
dir appends pre-encoded 1 MiB batches of 1 KiB records to that dir's
partitions, round robin, then flushes. Reported: MB/s and records/s of the
whole store, and the ratio to N=1. With ``--flush`` every append is fsynced
(``flush.messages=1``), which is where separate disks matter most.

**Loop devices on one disk share that disk's bandwidth**: on this VM every
image lives on the same virtual disk, so N dirs cannot add bandwidth; what
the table shows is whether pylog's per-dir engines and locks let the dirs
work in parallel (CPU, fsync latency), not what N real disks would give.

Needs root (mount). Always unmounts and removes what it made.

Usage: sudo bench/bench_jbod.py [--mb 512] [--flush] [--dir /tmp] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pylog
from pylog import records

RECORD = 1024
BATCH_RECORDS = 1000          # ~1 MiB batches


def mount_images(base: str, n: int, size_mb: int) -> list[str]:
    mounts = []
    for i in range(n):
        image = os.path.join(base, f"disk{i}.img")
        mnt = os.path.join(base, f"mnt{i}")
        os.makedirs(mnt)
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", image, mnt], check=True, capture_output=True)
        mounts.append(mnt)
    return mounts


def unmount(mounts: list[str]) -> None:
    for mnt in mounts:
        subprocess.run(["umount", mnt], check=False, capture_output=True)


def run(n: int, total_mb: int, flush: bool, base: str) -> tuple[float, float]:
    work = tempfile.mkdtemp(prefix=f"jbod{n}-", dir=base)
    mounts: list[str] = []
    try:
        mounts = mount_images(work, n, max(256, 2 * total_mb // n + 256))
        dirs = [os.path.join(m, "pylog") for m in mounts]
        store = pylog.open(dirs, log_segment_bytes=256 << 20)
        config = {"flush.messages": 1} if flush else {}
        store.create_topic("jbod", 4 * n, config)
        by_dir: dict[str, list] = {d: [] for d in store.log_dirs}
        for p in range(4 * n):
            lg = store.log("jbod", p)
            owner = next(d for d in by_dir if lg.path.startswith(d))
            by_dir[owner].append(lg)
        payload = records.encode_batch([os.urandom(RECORD)] * BATCH_RECORDS)
        per_dir = (total_mb << 20) // len(payload) // n
        start = threading.Barrier(n + 1)

        def writer(logs):
            start.wait()
            for i in range(per_dir):
                logs[i % len(logs)].append(payload)
            for lg in logs:
                lg.flush()

        threads = [threading.Thread(target=writer, args=(logs,)) for logs in by_dir.values()]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        store.close()
        written = per_dir * n * len(payload)
        return written / elapsed / 1e6, per_dir * n * BATCH_RECORDS / elapsed
    finally:
        unmount(mounts)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=512, help="MiB written per run (all dirs together)")
    ap.add_argument("--flush", action="store_true", help="fsync every append (flush.messages=1)")
    ap.add_argument("--dir", default="/tmp", help="where the images go")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_jbod needs root to mount loop filesystems", file=sys.stderr)
        return 2
    rows = []
    for n in (1, 2, 4):
        mbs, rps = run(n, args.mb, args.flush, args.dir)
        rows.append((n, mbs, rps))
    base = rows[0][1]
    policy = "fsync every append" if args.flush else "no fsync (page cache), flush at end"
    print(f"JBOD append, {args.mb} MiB of 1 KiB records in ~1 MiB batches, {policy}, "
          f"engine {pylog.io_engine()}; loop devices share one virtual disk")
    sep = "|" if args.markdown else " "
    print(f"{sep} dirs {sep} MB/s {sep} M records/s {sep} vs 1 dir {sep}")
    if args.markdown:
        print("|---:|---:|---:|---:|")
    for n, mbs, rps in rows:
        print(f"{sep} {n} {sep} {mbs:.0f} {sep} {rps / 1e6:.2f} {sep} {mbs / base:.2f}x {sep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
