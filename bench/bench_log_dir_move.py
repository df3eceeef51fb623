"""Partition move throughput (KIP-113, storage/log_dir_moves.py) beside ``cp`` of the same
files, same run, same file systems (issue 45, "Benchmark").

    python bench/bench_log_dir_move.py [--mb 512] [--dirs /disk1/x,/disk2/y] [--writers 0|1]

A partition of --mb MiB (1 GiB segments' worth of 1 KiB records in 64 MiB segments) is
written into the first dir, then moved to the second with ``alter_log_dir``, timed from
the call to the swap; then ``cp -r`` copies the moved partition dir back into a scratch
dir beside the source (the same bytes, the same direction of disks), then ``cp -r`` and
``sync``. Both read warm page cache (the data was just written or moved); the move also
fsyncs every file it wrote (cp's row adds ``sync`` for a fair comparison). With
--writers 1 a producer appends --writer-mib-s to the partition throughout the move (the
move must catch up with it). Prints MiB/s for each and their ratio; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import threading
import time

import pylog
from pylog.errors import NotLeaderOrFollowerError


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--dirs", help="two comma-separated log dirs (default: two temp dirs)")
    ap.add_argument("--writers", type=int, default=0, choices=(0, 1))
    ap.add_argument("--writer-mib-s", type=float, default=20.0,
                    help="the writer's rate (MiB/s) during the move")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="pylog-move-bench-")
    dirs = args.dirs.split(",") if args.dirs else [os.path.join(scratch, "d1"),
                                                     os.path.join(scratch, "d2")]
    try:
        with pylog.open(dirs, log_segment_bytes=64 << 20) as store:
            store.create_topic("bench", 2)
            p = next(p for p in range(2) if store.log_dir_of("bench", p) == os.path.abspath(dirs[0]))
            lg = store.log("bench", p)
            value = b"v" * 1000
            while lg.size < args.mb << 20:
                lg.append_records([value] * 1000)
            size = lg.size
            stop = threading.Event()
            appended, slowest = [0], [0.0]

            def write() -> None:
                began = time.perf_counter()
                while not stop.is_set():
                    due = appended[0] * 1000 / (args.writer_mib_s * (1 << 20))
                    ahead = due - (time.perf_counter() - began)
                    if ahead > 0:
                        time.sleep(ahead)        # the writer's rate, not the disk's
                    called = time.perf_counter()
                    try:
                        store.log("bench", p).append_records([value] * 100)
                        appended[0] += 100
                    except NotLeaderOrFollowerError:
                        pass
                    slowest[0] = max(slowest[0], time.perf_counter() - called)
            writer = threading.Thread(target=write) if args.writers else None
            if writer:
                writer.start()
            started = time.perf_counter()
            store.alter_log_dir("bench", p, dirs[1])
            while store.moving("bench", p):
                time.sleep(0.005)
            moved_s = time.perf_counter() - started
            stop.set()
            if writer:
                writer.join()
            moved_path = store.log("bench", p).path
        target = os.path.join(os.path.dirname(os.path.abspath(dirs[0])), "cp-copy")
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        subprocess.run(["cp", "-r", moved_path, target], check=True)
        subprocess.run(["sync"], check=True)
        cp_s = time.perf_counter() - started
        shutil.rmtree(target, ignore_errors=True)
        load = os.getloadavg()[0]
        mib = size / (1 << 20)
        print(f"partition of {mib:.0f} MiB, {dirs[0]} -> {dirs[1]}, writers={args.writers}"
              f" (records appended during the move: {appended[0]}), load average {load:.2f}")
        print(f"  alter_log_dir (copy + swap): {moved_s:.2f} s, {mib / moved_s:.0f} MiB/s")
        print(f"  cp -r + sync:                {cp_s:.2f} s, {mib / cp_s:.0f} MiB/s")
        print(f"  move / cp throughput:        {cp_s / moved_s:.2f}x")
        if args.writers:
            print(f"  slowest append during the move (the swap holds appends): "
                  f"{slowest[0] * 1000:.0f} ms")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
