"""Helpers shared by the storage benchmarks (bench_append.py, bench_pagecache.py).

Machine description, memory-state preparation, other-process CPU accounting,
fio runs and markdown tables. MB = 10**6 bytes, MiB = 2**20 bytes.

Memory states (read ../../shared/reference/limits/RESULTS.md, "Read this first"):
this VM hands guest memory that has been free for ~2 s back to the host, so
the first touch of a new page-cache page costs a host page fault.

- ``warm``: the files of the previous repetition (same volume) are deleted
  immediately before the timed run, so the new page-cache pages come from
  memory that was freed a moment earlier and is still backed by the host.
  This measures the software (pylog, fio, the peers), not the hypervisor.
- ``cold``: files deleted, ``drop_caches``, then ``COLD_WAIT`` (6 s) idle, so
  every new page-cache page is a host page fault (~0.4-0.8 GB/s here).

An append-only log never overwrites resident pages, so the "resident"
state (fio rewriting an already cached file) is printed only as a ceiling.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

MB = 1e6
MiB = 1 << 20
GiB = 1 << 30
COLD_WAIT = float(os.environ.get("COLD_WAIT", "6"))
BENCH_DATE = "2026-11-23"   # the date the tables in bench/RESULTS.md were taken


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ machine

def _read(path: str, default: str = "") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def mem_total_gib() -> float:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out = {}
    for line in _read("/proc/meminfo").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0].rstrip(":")] = int(parts[1]) * (1024 if len(parts) > 2 else 1)
    return out


def filesystem_of(path: str) -> str:
    try:
        out = subprocess.run(["df", "-PT", path], capture_output=True, text=True, timeout=10).stdout
        line = out.strip().splitlines()[-1].split()
        return f"{line[1]} on {line[0]} (mounted at {line[-1]})"
    except Exception:  # noqa: BLE001 - descriptive only
        return "unknown"


def fio_version() -> str | None:
    if not shutil.which("fio"):
        return None
    return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()


def git_sha() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def setup_block(target_dir: str, extra: dict[str, str] | None = None) -> list[str]:
    import pylog
    lines = [
        f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} (machine clock)",
        f"- machine: {cpu_model()}, {os.cpu_count()} vCPU, {mem_total_gib():.1f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}",
        f"- pylog {pylog.__version__} (git {git_sha()}), io engines: io_uring = "
        f"{pylog.io_engine('io_uring')!r}, portable = {pylog.io_engine('portable')!r}",
        f"- target: {target_dir}: {filesystem_of(target_dir)}",
        f"- fio: {fio_version() or 'not installed'}",
    ]
    for k, v in (extra or {}).items():
        lines.append(f"- {k}: {v}")
    return lines


# ------------------------------------------------------------- memory state

def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass


def prepare(state: str, *paths: str) -> None:
    """Deletes `paths`; for ``cold`` also drops caches and waits COLD_WAIT seconds."""
    for p in paths:
        remove(p)
    if state == "cold":
        drop_caches()
        time.sleep(COLD_WAIT)


# ------------------------------------------------------- other processes' CPU

_TCK = os.sysconf("SC_CLK_TCK")
_NCPU = os.cpu_count() or 1


def _stat_busy() -> int:
    v = [int(x) for x in _read("/proc/stat").splitlines()[0].split()[1:]]
    return v[0] + v[1] + v[2]      # user + nice + system ticks, all CPUs


def _kernel_thread_ticks() -> int:
    """CPU ticks of kernel threads (children of kthreadd): writeback, kdamond, ...
    They are excluded from "other processes" because our own writes wake them."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        s = _read(f"/proc/{d}/stat")
        if not s:
            continue
        rest = s[s.rindex(")") + 2:].split()
        if rest[1] in ("2", "0") or d == "2":
            total += int(rest[11]) + int(rest[12])
    return total


def _own_ticks() -> float:
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system) * _TCK


class CpuWatch:
    """CPU used by *other* processes between start() and stop(), as % of all cores.

    System user+nice+system ticks minus this process (and its reaped children,
    e.g. fio) minus kernel threads. Other processes are only observed.
    """

    def start(self) -> CpuWatch:
        self.t0 = time.monotonic()
        self.busy0, self.own0, self.k0 = _stat_busy(), _own_ticks(), _kernel_thread_ticks()
        return self

    def stop(self) -> float:
        wall = time.monotonic() - self.t0
        other = (_stat_busy() - self.busy0) - (_own_ticks() - self.own0) \
            - (_kernel_thread_ticks() - self.k0)
        return max(0.0, 100.0 * other / _TCK / max(wall, 1e-3) / _NCPU)


def wait_idle(max_wait: float, threshold: float = 10.0) -> float:
    """Waits (at most max_wait s) until other processes use < threshold % of all
    cores over a 1 s window; returns the last reading. Never touches them."""
    deadline = time.monotonic() + max_wait
    pct = 0.0
    while True:
        w = CpuWatch().start()
        time.sleep(1.0)
        pct = w.stop()
        if pct < threshold or time.monotonic() >= deadline:
            return pct


# ---------------------------------------------------------------------- fio

def fio(args: list[str], cwd: str | None = None, timeout: int = 600,
        with_latency: bool = False) -> dict:
    """Runs one fio job (JSON output); returns write MB/s, IOPS, fio CPU, syncs;
    `with_latency` adds write_ns (the writes' latencies summed, ns) and cpu_s
    (fio's user and system CPU seconds)."""
    cmd = ["fio", "--output-format=json", "--name=job"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    text = p.stdout
    if p.returncode != 0 or "{" not in text:
        raise RuntimeError(f"fio failed ({' '.join(cmd)}): {p.stderr.strip()[:500]}")
    d = json.loads(text[text.index("{"):])
    jobs = d["jobs"]
    if any(j.get("error") for j in jobs):
        raise RuntimeError(f"fio error {[j.get('error') for j in jobs]}: {' '.join(cmd)}")
    bw = sum(j["write"]["bw_bytes"] for j in jobs)
    io_bytes = sum(j["write"]["io_bytes"] for j in jobs)
    runtime_ms = max(j["write"]["runtime"] for j in jobs) or 1
    sync_lat = [j.get("sync", {}).get("lat_ns", {}).get("mean", 0) for j in jobs]
    if with_latency:
        extra = {"write_ns": sum(j["write"]["lat_ns"]["mean"] * j["write"]["total_ios"]
                                 for j in jobs),
                 "cpu_s": sum((j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1e3
                              for j in jobs)}
    else:
        extra = {}
    return {**extra, "MBps": bw / MB, "io_bytes": io_bytes, "seconds": runtime_ms / 1e3,
            "iops": sum(j["write"]["iops"] for j in jobs),
            "usr": sum(j["usr_cpu"] for j in jobs), "sys": sum(j["sys_cpu"] for j in jobs),
            "sync_ms": max(sync_lat) / 1e6 if sync_lat else 0.0, "cmd": " ".join(cmd)}


# ------------------------------------------------------------------- tables

def fmt(v, digits: int = 0) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def table(headers: list[str], rows: list[list], markdown: bool) -> str:
    cells = [[c if isinstance(c, str) else fmt(c) for c in r] for r in rows]
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def emit_json(path: str | None, row: dict) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
