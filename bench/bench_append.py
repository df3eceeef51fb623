"""Append throughput of pylog.Log beside fio and naive Python peers (issue 3, "Benchmarks").

For each workload (partitions x record size x batch size x flush policy x I/O
engine) pylog appends pre-encoded Kafka v2 batches (encoded once, outside the
timed loop; the same batch bytes are appended again and again and pylog
assigns fresh offsets to each). Beside each row, in the same run and on the
same filesystem:

- fio sequential writes with the same block size (= the batch's byte size),
  the same volume, the same file layout and the same fsync policy, with
  ``--ioengine=psync`` (compared with pylog's portable pwritev engine) and
  ``--ioengine=io_uring --iodepth=1`` (compared with pylog's io_uring engine);
- for single-partition workloads, naive alternatives fed the same records:
  framed writes into a buffered Python file, SQLite (WAL), LMDB, RocksDB
  (rocksdict) and an Arrow IPC stream, each with the matching sync policy,
  shown as ratios (pylog records/s / peer records/s).

Workloads
  partitions  1; 8 (8 Logs appended round-robin from one thread); 8/2thr (two
              threads, 4 Logs each). fio: 1 file; --nrfiles=8 round-robin; 2 jobs
              x 4 files.
  records     100 B and 1 KiB values, null keys, no headers, no compression.
  batches     200 records (the seeds' setting), or as many records as fit 64 KiB (the
              per-append row of issue 20) or 1 MiB.
  flush       none (the OS writes back; nothing is fsync'ed while timing),
              16MiB (flush.messages = the records of ~16 MiB of that partition's
              batches; fio --fdatasync=<blocks per 16 MiB>), batch
              (flush.messages=1: fdatasync with every append; fio --fdatasync=1).

Memory state (see storage_common.py): ``warm`` (default) deletes the previous
repetition's files right before each timed run, so new page-cache pages come
from memory freed a moment earlier; ``cold`` drops caches and idles 6 s first,
so every new page is a host page fault. A separate small table always runs the
cold state for the 1-partition no-flush rows, and the header prints fio's
resident-overwrite ceiling.

Only the append loop is timed (no open, no close: ``Log.close()`` would fsync
everything, which the no-flush policy does not do; the Logs are abandoned and
deleted instead). MB/s counts batch bytes as written (MB = 10**6 bytes).

usage: python bench/bench_append.py [--quick] [--dir DIR] [--markdown] [--memory warm|cold]
       [--python-append]   (Log.append's Python path only, without _append_fast)
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import storage_common as sc  # noqa: E402
from storage_common import MB, MiB, GiB  # noqa: E402

import pylog  # noqa: E402
from pylog.record import RECORD_BATCH_OVERHEAD, encode_batch, scan_batches  # noqa: E402

TIMESTAMP = 1_763_856_000_000   # fixed CreateTime (2025-11-23), inside pylog's accepted range
LAYOUTS = {"1": (1, 1), "8": (8, 1), "8/2thr": (8, 2)}
FLUSH_BYTES = 16 * MiB
COLD_VOLUME = 2 * GiB    # the first ~0.5-1 GiB of new pages is often still host-backed
idle_wait = 0.0


# ------------------------------------------------------------------ workload

class Workload:
    def __init__(self, layout: str, rec: int, batch: str, flush: str, volume: int):
        self.layout, self.rec, self.batch, self.flush = layout, rec, batch, flush
        self.partitions, self.threads = LAYOUTS[layout]
        self.values, self.data = make_batch(rec, batch)
        self.nrec = len(self.values)
        self.bsize = len(self.data)
        per_part = max(1, volume // self.partitions // self.bsize)
        self.appends_per_part = per_part
        self.total_bytes = per_part * self.partitions * self.bsize
        self.total_records = per_part * self.partitions * self.nrec
        # batches between two fsyncs of one partition
        self.sync_every = {"none": 0, "16MiB": max(1, round(FLUSH_BYTES / self.bsize)), "batch": 1}[flush]

    @property
    def key(self):
        return (self.layout, self.rec, self.batch, self.flush)

    def label(self):
        return [self.layout, f"{self.rec} B", f"{self.batch} ({self.bsize:,} B)"
                if self.batch in BATCH_BYTES else f"200 rec ({self.bsize:,} B)", self.flush]


_batches: dict = {}
# Batch kinds given in bytes: as many records as fit (the 64 KiB row, the 1 MiB rows).
BATCH_BYTES = {"1MiB": MiB, "64KiB": 64 << 10}


def make_batch(rec: int, kind: str):
    """(values, encoded batch bytes): seeded random values (incompressible)."""
    if (rec, kind) in _batches:
        return _batches[(rec, kind)]
    rng = random.Random(rec)
    if kind == "200":
        n, limit = 200, None
    elif kind in BATCH_BYTES:
        limit = BATCH_BYTES[kind]
        probe = encode_batch([rng.randbytes(rec) for _ in range(200)], timestamps=TIMESTAMP)
        per_record = (len(probe) - RECORD_BATCH_OVERHEAD) / 200
        n = max(1, int((limit - RECORD_BATCH_OVERHEAD) / per_record))
    else:
        raise SystemExit(f"--batches: {kind!r} is not one of 200, {', '.join(BATCH_BYTES)}")
    values = [rng.randbytes(rec) for _ in range(n)]
    data = encode_batch(values, timestamps=TIMESTAMP)
    while limit and len(data) > limit and len(values) > 1:   # varint growth: shrink to fit
        values.pop()
        data = encode_batch(values, timestamps=TIMESTAMP)
    check = scan_batches(data)      # correctness before timing: one valid batch of n records
    assert (check.batches, check.records) == (1, len(values)), check
    _batches[(rec, kind)] = (values, data)
    return values, data


# ---------------------------------------------------------------- pylog run

def pylog_config(w: Workload, engine: str) -> dict:
    cfg = {"pylog.io.engine": engine,
           "segment.bytes": min(2**31 - 1, max(w.appends_per_part * w.bsize + MiB, 1 << 30)),
           "max.message.bytes": 2 * MiB}
    if w.sync_every:
        cfg["flush.messages"] = w.sync_every * w.nrec
    return cfg


def pylog_once(root: str, w: Workload, engine: str, encode: bool = False) -> float:
    """One timed run; returns seconds for the append loop."""
    cfg = pylog_config(w, engine)
    logs = [pylog.Log(os.path.join(root, f"bench-{p}"), cfg) for p in range(w.partitions)]
    data, n = w.data, w.appends_per_part
    if encode:                      # the encode + append path (values -> batch inside the loop)
        values = w.values
        log = logs[0]
        t0 = time.perf_counter()
        for _ in range(n):
            log.append(encode_batch(values, timestamps=TIMESTAMP))
        dt = time.perf_counter() - t0
    elif w.threads == 1:
        appends = [log.append for log in logs]
        t0 = time.perf_counter()
        for _ in range(n):
            for append in appends:
                append(data)
        dt = time.perf_counter() - t0
    else:
        per = w.partitions // w.threads
        barrier = threading.Barrier(w.threads + 1)
        errors = []

        def work(mine):
            appends = [log.append for log in mine]
            barrier.wait()
            try:
                for _ in range(n):
                    for append in appends:
                        append(data)
            except BaseException as exc:   # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(logs[i * per:(i + 1) * per],))
                   for i in range(w.threads)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        if errors:
            raise errors[0]
    end = sum(log.log_end_offset for log in logs)
    assert end == (w.total_records if not encode else n * w.nrec), (end, w.total_records)
    # Abandon the logs without close(): close() would fsync everything (see module doc).
    for log in logs:
        log.abandon()
    del logs
    gc.collect()
    return dt


def repeat(state: str, reps: int, target: str, once) -> tuple[float, list[float]]:
    """Warm-up run + `reps` timed runs, each after prepare(state, target); best time."""
    times = []
    for i in range(reps + 1):
        sc.prepare(state, target)
        os.makedirs(target, exist_ok=True)
        dt = once(target)
        if i > 0 or state == "cold":
            times.append(dt)
    sc.remove(target)
    return min(times), times


# ------------------------------------------------ Python os.write comparator

def pywrite_once(root: str, w: Workload) -> float:
    """The floor of a Python append loop: os.write of the same batch bytes into
    O_APPEND files (same layout, threads and fdatasync policy as the pylog row;
    after every sync_every rounds each file is fdatasync'ed, as each pylog
    partition is when its flush.messages is reached)."""
    fds = [os.open(os.path.join(root, f"py-{p}.dat"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
           for p in range(w.partitions)]
    data, n, k = w.data, w.appends_per_part, w.sync_every
    write, sync = os.write, os.fdatasync

    def loop(mine):
        for i in range(n):
            for fd in mine:
                write(fd, data)
            if k and (i + 1) % k == 0:
                for fd in mine:
                    sync(fd)

    try:
        if w.threads == 1:
            t0 = time.perf_counter()
            loop(fds)
            return time.perf_counter() - t0
        per = w.partitions // w.threads
        threads = [threading.Thread(target=loop, args=(fds[i * per:(i + 1) * per],))
                   for i in range(w.threads)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0
    finally:
        for fd in fds:
            os.close(fd)


# ------------------------------------------------------------------ fio run

def fio_args(w: Workload, target: str, ioengine: str) -> list[str]:
    args = ["--rw=write", f"--bs={w.bsize}", "--fallocate=none", "--invalidate=0",
            f"--ioengine={ioengine}", "--iodepth=1"]
    files_per_job = w.partitions // w.threads
    if w.partitions == 1:
        args += [f"--filename={os.path.join(target, 'fio.dat')}", f"--size={w.total_bytes}"]
    else:
        args += [f"--directory={target}", f"--nrfiles={files_per_job}",
                 "--file_service_type=roundrobin", f"--size={w.total_bytes // w.threads}"]
        if w.threads > 1:
            args += [f"--numjobs={w.threads}"]
    if w.sync_every:
        k = w.sync_every
        if files_per_job > 1 and k > 1:
            # fio syncs the file of the current write every k writes (counted over all
            # its files); with k = 1 (mod files) the synced file rotates, so each file
            # is synced after ~k of its own writes, as each pylog partition is.
            while k % files_per_job != 1:
                k += 1
        args.append(f"--fdatasync={k}")
    return args


def fio_once(w: Workload, ioengine: str, target: str) -> dict:
    return sc.fio(fio_args(w, target, ioengine))


def fio_repeat(state: str, reps: int, target: str, w: Workload, ioengine: str) -> dict:
    best = None
    runs = []
    for i in range(reps + 1):
        sc.prepare(state, target)
        os.makedirs(target, exist_ok=True)
        r = fio_once(w, ioengine, target)
        if i > 0 or state == "cold":
            runs.append(r["MBps"])
            if best is None or r["MBps"] > best["MBps"]:
                best = r
    sc.remove(target)
    best["runs"] = runs
    return best


# -------------------------------------------------------------------- peers

HDR = struct.Struct(">iq")
OFF = struct.Struct(">Q")


def peer_plain(path, values, nb, sync_every):
    """Length-prefixed frames (4-byte length, 8-byte offset) into a buffered file."""
    pack = HDR.pack
    off = 0
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        w = f.write
        for i in range(nb):
            for v in values:
                w(pack(len(v), off) + v)
                off += 1
            if sync_every and (i + 1) % sync_every == 0:
                f.flush()
                os.fdatasync(f.fileno())
    return time.perf_counter() - t0


def peer_sqlite(path, values, nb, sync_every):
    """WAL mode, one transaction (executemany) per batch. synchronous: OFF for
    'none'; NORMAL with wal_autocheckpoint = 16 MiB of pages for '16MiB' (the WAL
    and the database are synced at each checkpoint); FULL for 'batch'."""
    mode = "OFF" if not sync_every else ("FULL" if sync_every == 1 else "NORMAL")
    n = len(values)
    t0 = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={mode}")
    if sync_every > 1:
        conn.execute(f"PRAGMA wal_autocheckpoint={FLUSH_BYTES // 4096}")
    conn.execute("CREATE TABLE log (offset INTEGER PRIMARY KEY, value BLOB)")
    for i in range(nb):
        base = i * n
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO log VALUES (?, ?)", zip(range(base, base + n), values))
        conn.execute("COMMIT")
    dt = time.perf_counter() - t0
    conn.close()
    return dt


def peer_lmdb(path, values, nb, sync_every):
    """One write transaction per batch, 8-byte big-endian keys. sync=False for
    'none', env.sync() every 16 MiB, sync=True (each commit) for 'batch'."""
    import lmdb
    total = nb * sum(len(v) + 16 for v in values)
    os.makedirs(path, exist_ok=True)
    env = lmdb.open(path, map_size=max(4 * total, 64 * MiB), sync=sync_every == 1,
                    metasync=sync_every == 1)
    pack = OFF.pack
    off = 0
    t0 = time.perf_counter()
    for i in range(nb):
        with env.begin(write=True) as txn:
            put = txn.put
            for v in values:
                put(pack(off), v)
                off += 1
        if sync_every > 1 and (i + 1) % sync_every == 0:
            env.sync(True)
    dt = time.perf_counter() - t0
    env.close()
    return dt


def peer_rocksdict(path, values, nb, sync_every):
    """A WriteBatch per batch (raw mode). WAL not synced for 'none', flush_wal(sync)
    every 16 MiB, WriteOptions.sync for 'batch'."""
    from rocksdict import Options, Rdict, WriteBatch, WriteOptions
    db = Rdict(path, Options(raw_mode=True))
    if sync_every == 1:
        wo = WriteOptions()
        wo.sync = True
        db.set_write_options(wo)
    pack = OFF.pack
    off = 0
    t0 = time.perf_counter()
    for i in range(nb):
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        for v in values:
            put(pack(off), v)
            off += 1
        db.write(wb)
        if sync_every > 1 and (i + 1) % sync_every == 0:
            db.flush_wal(True)
    dt = time.perf_counter() - t0
    db.close()
    return dt


def peer_arrow(path, values, nb, sync_every):
    """Arrow IPC stream: one record batch (offset int64, value binary) per batch."""
    import pyarrow as pa
    schema = pa.schema([("offset", pa.int64()), ("value", pa.binary())])
    n = len(values)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        with pa.ipc.new_stream(f, schema) as writer:
            for i in range(nb):
                base = i * n
                rb = pa.record_batch([pa.array(range(base, base + n), pa.int64()),
                                      pa.array(values, pa.binary())], schema=schema)
                writer.write_batch(rb)
                if sync_every and (i + 1) % sync_every == 0:
                    f.flush()
                    os.fdatasync(f.fileno())
    return time.perf_counter() - t0


PEERS = {
    "plain": ("plain file (framed, buffered)", None, peer_plain),
    "sqlite": ("SQLite WAL", None, peer_sqlite),
    "lmdb": ("LMDB", "lmdb", peer_lmdb),
    "rocksdict": ("RocksDB (rocksdict)", "rocksdict", peer_rocksdict),
    "arrow": ("Arrow IPC stream", "pyarrow", peer_arrow),
}


def available_peers(wanted):
    out = []
    for key in wanted:
        mod = PEERS[key][1]
        if mod:
            try:
                __import__(mod)
            except ImportError as exc:
                sc.log(f"skipping peer {key}: {exc} (pip install {mod})")
                continue
        out.append(key)
    return out


def peer_repeat(state, reps, target, key, values, nb, sync_every):
    times = []
    for _ in range(max(1, reps)):
        sc.prepare(state, target)
        times.append(PEERS[key][2](target, values, nb, sync_every))
    sc.remove(target)
    return min(times), times


# --------------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small subset, < 2 minutes")
    ap.add_argument("--dir", help="target directory (filesystem under test); default a temp dir in /tmp")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--memory", choices=("warm", "cold"), default="warm",
                    help="memory state of the main table (default warm)")
    ap.add_argument("--layouts", default=None, help="comma list of 1,8,8/2thr")
    ap.add_argument("--records", default=None, help="comma list of record sizes (100,1024)")
    ap.add_argument("--batches", default=None, help="comma list of 200,64KiB,1MiB")
    ap.add_argument("--flush", default=None, help="comma list of none,16MiB,batch")
    ap.add_argument("--engines", default="io_uring,portable")
    ap.add_argument("--peers", default="plain,sqlite,lmdb,rocksdict,arrow",
                    help="comma list of peers, or 'none'")
    ap.add_argument("--no-fio", action="store_true")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-memory table")
    ap.add_argument("--python-append", action="store_true",
                    help="Log.append without its C fast path (pylog.storage.log.use_fast_append(False)): "
                         "the orchestration's cost, for comparison")
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions per row (best of)")
    ap.add_argument("--json", help="append one JSON line per row to this file")
    ap.add_argument("--idle-wait", type=float, default=None,
                    help="before each row wait up to this many s for other processes to go "
                         "quiet (default 10, 0 with --quick)")
    args = ap.parse_args()

    quick = args.quick
    if args.python_append:
        import pylog.storage.log
        pylog.storage.log.use_fast_append(False)
    layouts = (args.layouts or ("1" if quick else "1,8,8/2thr")).split(",")
    records = [int(x) for x in (args.records or "100,1024").split(",")]
    batches = (args.batches or "200,1MiB").split(",")
    flushes = (args.flush or "none,16MiB,batch").split(",")
    engines = args.engines.split(",")
    volume = ({"none": 128 * MiB, "16MiB": 64 * MiB, "batch": 4 * MiB} if quick else
              {"none": 1 * GiB, "16MiB": 512 * MiB, "batch": 32 * MiB})
    peer_volume = ({"none": 32 * MiB, "16MiB": 32 * MiB, "batch": 2 * MiB} if quick else
                   {"none": 256 * MiB, "16MiB": 256 * MiB, "batch": 16 * MiB})
    reps = args.reps or (1 if quick else 3)
    flush_reps = args.reps or (1 if quick else 2)
    peers = [] if args.peers == "none" else available_peers(args.peers.split(","))
    have_fio = not args.no_fio and sc.fio_version() is not None
    if not have_fio and not args.no_fio:
        sc.log("fio not found: fio columns left empty (apt-get install fio)")
    state = args.memory
    md = args.markdown
    global idle_wait
    idle_wait = args.idle_wait if args.idle_wait is not None else (0 if quick else 10)

    base = args.dir or "/tmp"
    os.makedirs(base, exist_ok=True)
    root = tempfile.mkdtemp(prefix="pylog-bench-append-", dir=base)
    started = time.monotonic()
    try:
        run(root, quick, layouts, records, batches, flushes, engines, volume, peer_volume,
            reps, flush_reps, peers, have_fio, state, md, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sc.log(f"total {time.monotonic() - started:.0f} s")


def run(root, quick, layouts, records, batches, flushes, engines, volume, peer_volume,
        reps, flush_reps, peers, have_fio, state, md, args):
    target = os.path.join(root, "t")
    print("\n".join(sc.setup_block(root, {
        "memory state of the main table": state + (
            " (previous run's files deleted just before each timed run: recycled guest memory)"
            if state == "warm" else f" (drop_caches + {sc.COLD_WAIT:.0f} s idle before each run)"),
        "volume per row": ", ".join(f"flush {k}: {v / MiB:,.0f} MiB" for k, v in volume.items())
        + "; peers: " + ", ".join(f"{k}: {v / MiB:,.0f} MiB" for k, v in peer_volume.items()),
        "repetitions": f"warm-up + best of {reps} (no flush) / {flush_reps} (flush rows)",
    })))
    print()

    # ---- ceilings: fio 1 MiB buffered writes into resident (cached) pages and cold pages
    if have_fio:
        f = os.path.join(root, "ceil.dat")
        sc.fio(["--rw=write", "--bs=1M", f"--size={512 * MiB}", "--fallocate=none",
                "--ioengine=psync", f"--filename={f}"])
        res = sc.fio(["--rw=write", "--bs=1M", f"--size={512 * MiB}", "--fallocate=none",
                      "--invalidate=0", "--ioengine=psync", "--loops=3", f"--filename={f}"])
        sc.remove(f)
        print(f"Ceiling (same run): fio 1 MiB buffered overwrite of a cached 512 MiB file x3 "
              f"(resident pages, no allocation): {res['MBps']:,.0f} MB/s\n")

    rows, jrows = [], []
    results = {}
    for layout in layouts:
        for rec in records:
            for batch in batches:
                for flush in flushes:
                    w = Workload(layout, rec, batch, flush, volume[flush])
                    r = reps if flush == "none" else flush_reps
                    sc.wait_idle(idle_wait)
                    fio_res = {}
                    if have_fio:
                        for fe in ("psync", "io_uring"):
                            watch = sc.CpuWatch().start()
                            fio_res[fe] = fio_repeat(state, r, target, w, fe)
                            fio_res[fe]["bg"] = watch.stop()
                    pbest, _ = repeat(state, r, target, lambda t: pywrite_once(t, w))
                    py_mbps = w.total_bytes / pbest / MB
                    # fio's multi-file fsync: with --nrfiles > 1 the sync I/O goes to the next
                    # file of the round-robin, not the one just written (seen with strace),
                    # so those rows are not comparable.
                    fio_ok = w.partitions == 1 or w.flush == "none"
                    for engine in engines:
                        watch = sc.CpuWatch().start()
                        best, times = repeat(state, r, target,
                                             lambda t: pylog_once(t, w, engine))
                        bg = watch.stop()
                        mbps = w.total_bytes / best / MB
                        recps = w.total_records / best
                        fe = "io_uring" if engine == "io_uring" else "psync"
                        fio_mbps = fio_res[fe]["MBps"] if fio_res else None
                        bgs = [bg] + ([fio_res[fe]["bg"]] if fio_res else [])
                        results[(w.key, engine)] = (mbps, recps)
                        spread = f"{w.total_bytes / max(times) / MB:,.0f}-{mbps:,.0f}"
                        fio_cell = (sc.fmt(fio_mbps) if fio_ok else f"({sc.fmt(fio_mbps)})") if fio_mbps else "n/a"
                        rows.append(w.label() + [engine, mbps, recps, spread, py_mbps,
                                                 f"{mbps / py_mbps:.2f}", fio_cell,
                                                 f"{mbps / fio_mbps:.2f}" if fio_mbps and fio_ok else "n/c",
                                                 f"{max(bgs):.0f}%" + (" **noisy**" if max(bgs) >= 10 else "")])
                        row = {"bench": "append", "state": state, "layout": layout, "record": rec,
                               "batch": batch, "batch_bytes": w.bsize, "flush": flush, "engine": engine,
                               "bytes": w.total_bytes, "records": w.total_records, "MBps": mbps,
                               "recps": recps, "times": times, "fio_MBps": fio_mbps,
                               "fio_comparable": fio_ok, "pywrite_MBps": py_mbps,
                               "fio_cmd": fio_res[fe]["cmd"] if fio_res else None, "bg_pct": max(bgs)}
                        jrows.append(row)
                        sc.emit_json(args.json, row)
                        sc.log(f"  {layout:6} {rec:5} B {batch:5} flush={flush:6} {engine:8} "
                               f"{mbps:8,.0f} MB/s {recps:12,.0f} rec/s  os.write {py_mbps:,.0f}  fio {sc.fmt(fio_mbps)} MB/s"
                               f"  bg {max(bgs):.0f}%")
    print(f"### Append throughput, memory state: {state}\n")
    print(sc.table(["partitions", "record", "batch", "flush", "engine", "pylog MB/s", "pylog records/s",
                    "pylog range MB/s", "Python os.write MB/s", "pylog / os.write",
                    "fio MB/s (same engine)", "pylog / fio", "other CPU"], rows, md))
    print("\nfio in parentheses / n/c: with --nrfiles > 1 fio sends each fdatasync to the next "
          "file of its round-robin rather than the file just written (checked with strace), "
          "so multi-file rows with a flush policy are not comparable; use the os.write column.")
    print()

    # ---- peers: single partition only
    if peers and "1" in layouts:
        prow = []
        for rec in records:
            for batch in batches:
                for flush in flushes:
                    w = Workload("1", rec, batch, flush, peer_volume[flush])
                    nb = w.appends_per_part
                    sc.wait_idle(idle_wait)
                    watch = sc.CpuWatch().start()
                    best, _ = repeat(state, 1 if quick else 2, target,
                                     lambda t: pylog_once(t, w, "io_uring", encode=True))
                    enc_recps = w.total_records / best
                    cells = []
                    for key in peers:
                        pbest, ptimes = peer_repeat(state, 1 if quick else 2, target, key,
                                                    w.values, nb, w.sync_every)
                        precps = nb * w.nrec / pbest
                        mine = results.get((w.key, "io_uring"), (None, None))[1]
                        cells.append(f"{precps:,.0f} ({mine / precps:.1f}x)" if mine else f"{precps:,.0f}")
                        row = {"bench": "append-peer", "state": state, "peer": key, "record": rec,
                               "batch": batch, "flush": flush, "records": nb * w.nrec, "recps": precps,
                               "times": ptimes, "pylog_recps": mine}
                        sc.emit_json(args.json, row)
                        sc.log(f"  peer {key:9} {rec:5} B {batch:5} flush={flush:6} {precps:12,.0f} rec/s")
                    bg = watch.stop()
                    mine = results.get((w.key, "io_uring"), (None, None))[1]
                    prow.append([f"{rec} B", w.label()[2], flush, mine, f"{enc_recps:,.0f} "
                                 f"({mine / enc_recps:.1f}x)" if mine else f"{enc_recps:,.0f}"] + cells
                                + [f"{bg:.0f}%" + (" **noisy**" if bg >= 10 else "")])
        print(f"### Single partition: pylog (io_uring) records/s beside naive peers, memory state: {state}\n")
        print("Cells: peer records/s (pylog pre-encoded records/s / peer records/s). Peers and the "
              "'encode + append' column write " + ", ".join(
                  f"{v / MiB:,.0f} MiB for flush {k}" for k, v in peer_volume.items()) + ".\n")
        print(sc.table(["record", "batch", "flush", "pylog pre-encoded", "pylog encode + append"]
                       + [PEERS[k][0] for k in peers] + ["other CPU"], prow, md))
        print()

    # ---- cold memory: 1 partition, no flush, 1 KiB records
    if not args.no_cold and not quick and state != "cold" and "none" in flushes:
        crow = []
        for batch in batches:
            sc.wait_idle(idle_wait)
            w = Workload("1", 1024 if 1024 in records else records[0], batch, "none", COLD_VOLUME)
            fio_cold = fio_repeat("cold", 1, target, w, "psync")["MBps"] if have_fio else None
            for engine in engines:
                best, times = repeat("cold", 1 if quick else 2, target, lambda t: pylog_once(t, w, engine))
                mbps = w.total_bytes / best / MB
                crow.append(w.label() + [engine, mbps, w.total_records / best, fio_cold,
                                         f"{mbps / fio_cold:.2f}" if fio_cold else "n/a"])
                sc.emit_json(args.json, {"bench": "append", "state": "cold", "layout": "1",
                                         "record": w.rec, "batch": batch, "flush": "none",
                                         "engine": engine, "MBps": mbps, "times": times,
                                         "fio_MBps": fio_cold})
                sc.log(f"  cold {batch:5} {engine:8} {mbps:8,.0f} MB/s  fio psync {sc.fmt(fio_cold)}")
        print(f"### Cold memory (drop_caches + {sc.COLD_WAIT:.0f} s idle before each run: new "
              f"page-cache pages are host page faults), {COLD_VOLUME / GiB:.0f} GiB per run, best of 2\n")
        print(sc.table(["partitions", "record", "batch", "flush", "engine", "pylog MB/s",
                        "pylog records/s", "fio psync MB/s (cold)", "pylog / fio"], crow, md))
        print()


if __name__ == "__main__":
    main()
