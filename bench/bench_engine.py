"""I/O engine throughput: 1 MiB writes through IoEngine (portable, io_uring) vs an os.pwrite loop.

Cases: "cached" overwrites a file whose pages are already resident (no page
allocation: this is the engine's own overhead), "datasync" adds an fdatasync
after every write (the disk), "sync64" dirties 1 MiB in each of 64 files and
syncs them with one call (os.fdatasync loop for the os.pwrite row). This VM hands idle guest memory back to the
host, so writes into new pages measure the hypervisor rather than the engine
(see shared/reference/limits/RESULTS.md); hence no "new file" case.

    python bench/bench_engine.py [--size-mib 1024] [--dir /tmp] [--reps 3] [--json]
"""
import argparse
import json
import os
import platform
import subprocess
import tempfile
import time

from pylog._core.engine import IoEngine

MB = 1e6
MiB = 1 << 20


def sync64(dirpath, buf, engine, reps):
    """Best time to fdatasync 64 files with 1 MiB dirty each."""
    fds = [os.open(os.path.join(dirpath, f"sync64.{i}"), os.O_RDWR | os.O_CREAT, 0o644)
           for i in range(64)]
    times = []
    try:
        for _ in range(reps):
            for fd in fds:
                os.pwrite(fd, buf, 0)
            t0 = time.perf_counter()
            if engine is None:
                for fd in fds:
                    os.fdatasync(fd)
            else:
                engine.sync(fds)
            times.append(time.perf_counter() - t0)
    finally:
        for i, fd in enumerate(fds):
            os.close(fd)
            os.unlink(os.path.join(dirpath, f"sync64.{i}"))
    return min(times), max(times)


def pwrite_loop(fd, buf, size, datasync):
    for pos in range(0, size, len(buf)):
        os.pwrite(fd, buf, pos)
        if datasync:
            os.fdatasync(fd)


def engine_loop(engine):
    def run(fd, buf, size, datasync):
        bufs = [buf]
        for pos in range(0, size, len(buf)):
            engine.writev(fd, bufs, pos, datasync)
    return run


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), max(times)


def setup_block(args):
    fs = subprocess.run(["stat", "-f", "-c", "%T", args.dir], capture_output=True, text=True)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    return (f"# bench_engine: {args.size_mib} MiB in 1 MiB writes, best of {args.reps}\n"
            f"# {time.strftime('%Y-%m-%d %H:%M')} | {cpu} x{os.cpu_count()} | "
            f"Linux {platform.release()} | {fs.stdout.strip()} at {args.dir} | "
            f"Python {platform.python_version()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON line per result")
    args = ap.parse_args()
    size = args.size_mib * MiB
    buf = os.urandom(MiB)
    engines = {"os.pwrite": None, "portable": IoEngine("portable")}
    try:
        engines["io_uring"] = IoEngine("io_uring")
    except OSError as exc:
        print(f"# io_uring skipped: {exc}")
    peers = {name: pwrite_loop if e is None else engine_loop(e) for name, e in engines.items()}

    def report(case, name, nbytes, lo, hi, base):
        mbps, worst = nbytes / lo / MB, nbytes / hi / MB
        if args.json:
            print(json.dumps({"case": case, "writer": name, "MBps": round(mbps),
                              "worst_MBps": round(worst), "size": nbytes}))
        else:
            print(f"{case:<10}{name:<11}{mbps:>9,.0f}{worst:>12,.0f}{mbps / (base or mbps):>13.2f}x")
        return mbps

    fd, path = tempfile.mkstemp(dir=args.dir, prefix="bench_engine.")
    try:
        pwrite_loop(fd, buf, size, False)  # make every page resident: "cached" overwrites
        if not args.json:
            print(setup_block(args))
            print(f"{'case':<10}{'writer':<11}{'MB/s':>9}{'worst MB/s':>12}{'vs os.pwrite':>14}")
        for case, datasync in (("cached", False), ("datasync", True)):
            base = None
            for name, run in peers.items():
                # Correctness first: the file must hold exactly `buf` repeated.
                os.pwrite(fd, bytes(len(buf)), 0)
                run(fd, buf, size, datasync)
                assert os.pread(fd, len(buf), 0) == buf and os.fstat(fd).st_size == size
                lo, hi = best(lambda: run(fd, buf, size, datasync), args.reps)
                mbps = report(case, name, size, lo, hi, base)
                base = base or mbps
        base = None
        for name, engine in engines.items():
            lo, hi = sync64(args.dir, buf, engine, args.reps)
            mbps = report("sync64", name, 64 * MiB, lo, hi, base)
            base = base or mbps
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
