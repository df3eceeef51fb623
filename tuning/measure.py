"""One measurement of a matrix row: pylog, and fio as the filesystem's limit.

**pylog**: ``pylog perf produce`` in its own process (so a crash or a leak of one
row cannot touch the next), in-process store on the row's mounts (one log dir per
device), ``send_batch`` of ``batch_bytes`` worth of records a call, keys spread over
``devices x partitions_per_device`` partitions, one producer thread per device,
``acks=1`` (the flush policy is the topic's ``flush.messages``), the row's I/O mode,
engine and fadvise. The summary gives MB/s, send -> ack latency percentiles (append
latency), the flushes' mean time (fsync latency) and the process's CPU seconds.

**fio**: the same bytes in blocks of the batch size (rounded up to 4 KiB for
O_DIRECT), one job per device at once, ``psync`` buffered or ``io_uring`` O_DIRECT,
``--fdatasync`` matching the flush policy: what the filesystem gives a plain writer.
Both start from the same memory state (the previous run's files deleted just before).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from .matrix import Row

__all__ = ["run_pylog", "run_fio", "clear"]


def _die_with_parent() -> None:
    """In the child: SIGKILL when the rig dies (Linux PR_SET_PDEATHSIG), so a kill -9 of
    the rig does not leave its measurement writing to a mount."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG = 1


def _run_child(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Runs a measurement in a process group of its own; if the rig is interrupted (or
    the child overruns), the whole group is killed (fio's job processes too), so no
    process is left holding files on a mount the rig is about to remove."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_die_with_parent)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def clear(mounts: list[str]) -> None:
    """Deletes what earlier runs left on the mounts, then syncs."""
    for m in mounts:
        for name in os.listdir(m):
            if name == "lost+found":
                continue
            path = os.path.join(m, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    os.sync()


def prepare(mounts: list[str], memory: str) -> None:
    clear(mounts)
    if memory == "cold":
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        time.sleep(float(os.environ.get("COLD_WAIT", "6")))


def run_pylog(row: Row, mounts: list[str], volume_mib: int, timeout: float = 900) -> dict:
    """Runs the row once; returns the perf summary (plus the command)."""
    log_dirs = [os.path.join(m, "pylog") for m in mounts]
    partitions = row.devices * row.partitions_per_device
    records = max(1, (volume_mib << 20) // max(row.record_size, 1))
    cmd = [sys.executable, "-m", "pylog.cli", "perf", "produce", "--json",
           "--log-dirs", ",".join(log_dirs), "--topic", "tuning", "--num-records", str(records),
           "--record-size", str(row.record_size), "--api", "send_batch",
           "--batch-records", str(row.batch_records), "--partitions", str(partitions),
           "--keys", str(max(64, partitions * 16)), "--producers", str(row.devices),
           "--acks", "1", "--io-engine", row.engine, "--reporting-interval", "3600000",
           "--producer-props", f"max.request.size={max(row.batch_bytes * 2, 1 << 20)}",
           "--topic-config", f"max.message.bytes={max(row.batch_bytes * 2, 1 << 20)}",
           "--topic-config", f"pylog.flush.fadvise.dontneed={'true' if row.fadvise else 'false'}"]
    flush = row.flush_messages()
    if flush is not None:
        cmd += ["--flush-messages", str(flush)]
    if row.io == "direct":
        cmd.append("--direct")
    done = _run_child(cmd, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"pylog perf failed for {row.key}: {done.stderr.strip()[-2000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    summary["command"] = " ".join(cmd[2:])
    return summary


def run_fio(row: Row, mounts: list[str], volume_mib: int, timeout: float = 900) -> dict:
    """fio's sequential write of the row's bytes on the row's mounts (one job each)."""
    fio = shutil.which("fio")
    if fio is None:
        raise RuntimeError("fio is not installed (apt-get install fio)")
    bs = row.batch_bytes
    if row.io == "direct":
        bs = -(-bs // 4096) * 4096
    per_device = max(bs, (volume_mib << 20) // row.devices // bs * bs)
    args = [fio, "--output-format=json", "--group_reporting", "--rw=write", f"--bs={bs}",
            f"--size={per_device}", "--fallocate=none", "--invalidate=0",
            f"--ioengine={'io_uring' if row.io == 'direct' else 'psync'}",
            f"--direct={1 if row.io == 'direct' else 0}", "--iodepth=1", "--end_fsync=0"]
    if row.flush == "batch":
        args.append("--fdatasync=1")
    elif row.flush == "16MiB":
        args.append(f"--fdatasync={max(1, (16 << 20) // bs)}")
    for i, m in enumerate(mounts):
        args += [f"--name=dev{i}", f"--filename={os.path.join(m, 'fio.dat')}"]
    done = _run_child(args, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"fio failed for {row.key}: {done.stderr.strip()[-2000:]}")
    report = json.loads(done.stdout[done.stdout.index("{"):])
    job = report["jobs"][0]["write"]
    return {"mb_per_sec": job["bw_bytes"] / 2**20, "bytes": job["io_bytes"],
            "block_bytes": bs, "command": " ".join(args[1:])}
