"""What pylog's page-cache controls do (issue 3, "Page-cache controls" and "Benchmarks").

Three experiments, each on ext4 and on XFS, loop-mounted from image files
under /tmp when run as root (the loop device uses direct I/O on its backing
file, so the host filesystem's page cache does not hold a second copy), or on
the temp dir otherwise:

1. ``pylog.flush.fadvise.dontneed``: one partition appends ``--volume``
   (default 2 GiB) of 1 MiB batches of 1 KiB records with a flush every 64 MiB,
   either by the log itself (flush.messages) or by the caller (Log.flush()). Reported: append throughput (flushes included), then the
   page-cache footprint of the partition's files, measured exactly with
   mincore(2) over a read-only mapping (what fincore does) and, for context,
   the change of /proc/meminfo Cached (machine-wide, so other processes add
   noise).
2. ``pylog.write.behind.bytes`` (sync_file_range WRITE after every N appended
   bytes): one partition appends 1 GiB, no flush policy. Reported: append
   throughput, Dirty + Writeback from /proc/meminfo right after the last
   append, the latency of the ``flush()`` that follows, and the durable
   throughput (bytes / (appends + flush)).
3. ``preallocate`` (fallocate of segment.bytes at segment creation, trimmed on
   roll and close): 8 partitions appended round-robin, 256 MiB segments, a
   flush every 16 MiB per partition, so the filesystem allocates blocks for
   8 growing files at once. Reported: throughput of open + appends (the
   fallocate is inside the timed part) and the extents per .log file after
   close (``filefrag``; ext4 extents hold at most 128 MiB, so a 256 MiB file
   has at least 2).

Memory state: "warm": each run starts right after the previous run's files
were deleted (recycled guest memory, see storage_common.py). Each
configuration runs ``--reps`` times (best throughput; the footprints come
from the same run).

usage: python bench/bench_pagecache.py [--quick] [--dir DIR] [--markdown] [--fs ext4,xfs]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import glob
import mmap
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc  # noqa: E402
from storage_common import MB, MiB, GiB  # noqa: E402

import pylog  # noqa: E402
from pylog.record import encode_batch  # noqa: E402

TIMESTAMP = 1_763_856_000_000
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
PAGE = mmap.PAGESIZE


# ----------------------------------------------------------------- helpers

def resident_bytes(path: str) -> int:
    """Bytes of `path` in the page cache (mincore over a PROT_READ mapping, as fincore does)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in bytes(vec)) * PAGE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_of_logs(root: str) -> int:
    return sum(resident_bytes(p) for p in glob.glob(os.path.join(root, "*", "*.log")))


def extents(path: str) -> int | None:
    if not shutil.which("filefrag"):
        return None
    out = subprocess.run(["filefrag", path], capture_output=True, text=True).stdout
    m = re.search(r"(\d+) extents? found", out)
    return int(m.group(1)) if m else None


def make_batch(rec: int = 1024):
    import random
    rng = random.Random(rec)
    values = [rng.randbytes(rec) for _ in range(1000)]
    data = encode_batch(values, timestamps=TIMESTAMP)
    return len(values), data


def abandon(logs) -> None:
    """Closes the files without Log.close() (which would fsync and trim)."""
    for log in logs:
        log.abandon()
    gc.collect()


# ------------------------------------------------------------ loop mounts

class Mounts:
    """Loop-mounted ext4/XFS filesystems on sparse images; always cleaned up."""

    def __init__(self, base: str, size: int):
        self.base, self.size = base, size
        self.mounted: list[tuple[str, str, str]] = []   # (mountpoint, loopdev, image)

    def make(self, fs: str) -> str:
        image = os.path.join(self.base, f"{fs}.img")
        mnt = os.path.join(self.base, f"mnt-{fs}")
        os.makedirs(mnt, exist_ok=True)
        with open(image, "wb") as f:
            f.truncate(self.size)
        dev = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", image],
                             capture_output=True, text=True, check=True).stdout.strip()
        self.mounted.append((mnt, dev, image))
        mkfs = ["mkfs.ext4", "-q", "-F", dev] if fs == "ext4" else ["mkfs.xfs", "-q", "-f", dev]
        subprocess.run(mkfs, check=True, capture_output=True)
        subprocess.run(["mount", dev, mnt], check=True, capture_output=True)
        return mnt

    def cleanup(self) -> None:
        while self.mounted:
            mnt, dev, image = self.mounted.pop()
            for cmd in (["umount", mnt], ["umount", "-l", mnt]):
                if subprocess.run(cmd, capture_output=True).returncode == 0 or not os.path.ismount(mnt):
                    break
                time.sleep(1)
            subprocess.run(["losetup", "-d", dev], capture_output=True)
            for p in (image,):
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            shutil.rmtree(mnt, ignore_errors=True)


# ------------------------------------------------------------- experiments

def run_dontneed(root: str, volume: int, dontneed: bool, engine: str, trigger: str) -> dict:
    """trigger: "flush.messages" (the log flushes itself) or "flush()" (the caller flushes)."""
    nrec, data = make_batch()
    per_flush = max(1, (64 * MiB) // len(data))
    cfg = {"pylog.io.engine": engine, "segment.bytes": 1 << 30, "max.message.bytes": 2 * MiB,
           "pylog.flush.fadvise.dontneed": dontneed}
    if trigger == "flush.messages":
        cfg["flush.messages"] = per_flush * nrec
    n = volume // len(data)
    cached0 = sc.meminfo().get("Cached", 0)
    log = pylog.Log(os.path.join(root, "dn-0"), cfg)
    t0 = time.perf_counter()
    if trigger == "flush.messages":
        for _ in range(n):
            log.append(data)
    else:
        for i in range(n):
            log.append(data)
            if (i + 1) % per_flush == 0:
                log.flush()
    dt = time.perf_counter() - t0
    resident = resident_of_logs(root)
    cached = sc.meminfo().get("Cached", 0) - cached0
    segs = len(log.segments)
    abandon([log])
    return {"MBps": n * len(data) / dt / MB, "resident": resident, "cached_delta": cached,
            "bytes": n * len(data), "segments": segs, "flushes": n // per_flush}


def run_write_behind(root: str, volume: int, step: int, engine: str) -> dict:
    nrec, data = make_batch()
    cfg = {"pylog.io.engine": engine, "segment.bytes": 1 << 30, "max.message.bytes": 2 * MiB,
           "pylog.write.behind.bytes": step}
    n = min(volume, (1 << 30) - MiB) // len(data)
    log = pylog.Log(os.path.join(root, "wb-0"), cfg)
    os.sync()                       # start from a machine with nothing dirty
    t0 = time.perf_counter()
    for _ in range(n):
        log.append(data)
    t1 = time.perf_counter()
    mi = sc.meminfo()
    dirty = mi.get("Dirty", 0) + mi.get("Writeback", 0)
    t2 = time.perf_counter()
    log.flush()
    t3 = time.perf_counter()
    abandon([log])
    total = n * len(data)
    return {"MBps": total / (t1 - t0) / MB, "dirty": dirty, "flush_s": t3 - t2,
            "durable_MBps": total / ((t1 - t0) + (t3 - t2)) / MB, "bytes": total}


def run_preallocate(root: str, volume: int, prealloc: bool, engine: str) -> dict:
    nrec, data = make_batch()
    parts = 8
    seg = 256 * MiB
    per_part = min(volume // parts, seg - MiB) // len(data)
    cfg = {"pylog.io.engine": engine, "segment.bytes": seg, "max.message.bytes": 2 * MiB,
           "flush.messages": max(1, (16 * MiB) // len(data)) * nrec, "preallocate": prealloc}
    t0 = time.perf_counter()
    logs = [pylog.Log(os.path.join(root, f"pa-{p}"), cfg) for p in range(parts)]
    for _ in range(per_part):
        for log in logs:
            log.append(data)
    dt = time.perf_counter() - t0
    for log in logs:
        log.close()
    ext = [extents(p) for p in sorted(glob.glob(os.path.join(root, "pa-*", "*.log")))]
    ext = [e for e in ext if e is not None]
    total = per_part * parts * len(data)
    return {"MBps": total / dt / MB, "extents": ext, "bytes": total}


def best(runs: list[dict]) -> dict:
    return max(runs, key=lambda r: r["MBps"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", help="base directory for images / the temp dir (default /tmp)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--fs", default="ext4,xfs", help="filesystems to loop-mount when root")
    ap.add_argument("--no-loop", action="store_true", help="run on the temp dir even as root")
    ap.add_argument("--volume", type=int, default=None, help="bytes per run (default 2 GiB, quick 256 MiB)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--engine", default="io_uring")
    ap.add_argument("--json")
    args = ap.parse_args()
    volume = args.volume or (256 * MiB if args.quick else 2 * GiB)
    reps = args.reps or (1 if args.quick else 2)
    base = tempfile.mkdtemp(prefix="pylog-bench-pagecache-", dir=args.dir or "/tmp")
    mounts = Mounts(base, max(8 * GiB, 3 * volume))

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        use_loop = os.geteuid() == 0 and not args.no_loop and shutil.which("losetup")
        targets = []
        if use_loop:
            for fs in args.fs.split(","):
                tool = "mkfs.ext4" if fs == "ext4" else "mkfs.xfs"
                if not shutil.which(tool):
                    sc.log(f"skipping {fs}: {tool} not installed")
                    continue
                targets.append((f"{fs} (loop, direct-io backing file)", mounts.make(fs)))
        else:
            sc.log("not root (or --no-loop): measuring on the temp dir only")
            targets.append((sc.filesystem_of(base), os.path.join(base, "t")))
        print("\n".join(sc.setup_block(base, {
            "filesystems": "; ".join(f"{name} at {path}" for name, path in targets),
            "engine": args.engine,
            "volume per run": f"{volume / MiB:,.0f} MiB (write-behind: at most 1 GiB), best of {reps}",
            "memory state": "warm (each run right after the previous run's files were deleted)",
        })))
        print()
        run_all(targets, volume, reps, args)
    finally:
        mounts.cleanup()
        shutil.rmtree(base, ignore_errors=True)
        for s, h in old.items():
            signal.signal(s, h)


def run_all(targets, volume, reps, args) -> None:
    md = args.markdown
    dn_rows, wb_rows, pa_rows = [], [], []
    for name, path in targets:
        fsname = name.split()[0]
        target = os.path.join(path, "bench")

        def runs(fn, *a):
            out = []
            for _ in range(reps):
                sc.prepare("warm", target)
                os.makedirs(target)
                out.append(fn(target, *a))
            sc.remove(target)
            return out

        for trigger, dn in (("flush.messages", False), ("flush.messages", True),
                            ("flush()", False), ("flush()", True)):
            r = best(runs(run_dontneed, volume, dn, args.engine, trigger))
            dn_rows.append([fsname, trigger, "on" if dn else "off", r["MBps"], f"{r['resident'] / MiB:,.0f}",
                            f"{r['cached_delta'] / MiB:,.0f}", f"{r['bytes'] / MiB:,.0f}"])
            sc.emit_json(args.json, {"bench": "fadvise", "fs": fsname, "dontneed": dn,
                                     "trigger": trigger, **r})
            sc.log(f"  {fsname} {trigger} dontneed={dn}: {r['MBps']:,.0f} MB/s resident {r['resident'] / MiB:,.0f} MiB")
        for step in (0, MiB, 8 * MiB, 64 * MiB):
            r = best(runs(run_write_behind, volume, step, args.engine))
            wb_rows.append([fsname, f"{step // MiB} MiB" if step else "0 (off)", r["MBps"],
                            f"{r['dirty'] / MiB:,.0f}", f"{r['flush_s'] * 1000:,.1f}", r["durable_MBps"],
                            f"{r['bytes'] / MiB:,.0f}"])
            sc.emit_json(args.json, {"bench": "write_behind", "fs": fsname, "step": step, **r})
            sc.log(f"  {fsname} write.behind={step}: {r['MBps']:,.0f} MB/s dirty {r['dirty'] / MiB:,.0f} MiB "
                   f"flush {r['flush_s'] * 1000:.1f} ms")
        for pa in (False, True):
            rs = runs(run_preallocate, volume, pa, args.engine)
            r = best(rs)
            ext = r["extents"]
            pa_rows.append([fsname, "on" if pa else "off", r["MBps"],
                            f"{sum(ext) / len(ext):.1f} (min {min(ext)}, max {max(ext)})" if ext else "n/a",
                            f"{r['bytes'] / MiB:,.0f}"])
            sc.emit_json(args.json, {"bench": "preallocate", "fs": fsname, "preallocate": pa, **r})
            sc.log(f"  {fsname} preallocate={pa}: {r['MBps']:,.0f} MB/s extents {ext}")

    print("### pylog.flush.fadvise.dontneed: page-cache footprint after writing with a flush "
          "every 64 MiB (1 partition, 1 MiB batches)\n")
    print(sc.table(["filesystem", "flush by", "dontneed", "append MB/s (incl. flushes)", "log pages resident MiB (mincore)",
                    "/proc/meminfo Cached change MiB", "written MiB"], dn_rows, md))
    print()
    print("### pylog.write.behind.bytes: dirty data and the cost of a later flush() "
          "(1 partition, 1 MiB batches, no flush policy)\n")
    print(sc.table(["filesystem", "write.behind.bytes", "append MB/s", "Dirty+Writeback after appends MiB",
                    "flush() ms", "durable MB/s (appends + flush)", "written MiB"], wb_rows, md))
    print()
    print("### preallocate: throughput and fragmentation (8 partitions round-robin, 256 MiB segments, "
          "flush every 16 MiB per partition)\n")
    print(sc.table(["filesystem", "preallocate", "open + append MB/s", "extents per .log (filefrag)",
                    "written MiB"], pa_rows, md))
    print()


if __name__ == "__main__":
    main()
