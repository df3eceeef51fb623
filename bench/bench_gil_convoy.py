#!/usr/bin/env python3
"""The GIL convoy: one thread appending small batches beside threads running Python.

A thread that drops the GIL for I/O (every append writes) must take it back
from threads that run Python; CPython hands it over only after a switch
interval (5 ms by default). This prints the appends/s of one writer thread
(1.3 KB batches of 20 records of 50 B) beside:

* nothing (the writer alone);
* 1 thread spinning in Python;
* 1 and 3 reader threads polling the log's tail (``Log.read`` + ``records()``
  in a loop, as a consumer that never waits would);

for two writers: pylog's ``Log.append`` and the naive alternative, ``os.write``
of the same bytes to a file (the machine's limit under the same convoy), with
the default switch interval and with ``--switch-interval`` (0.5 ms).

Usage:
    bench/bench_gil_convoy.py [--seconds 1.5] [--rounds 2] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import threading
import time

import storage_common as sc

from pylog import records
from pylog.storage.log import Log

BATCH = records.encode_batch([b"v" * 50] * 20)
NEIGHBOURS = [("none", 0, None), ("1 spinning thread", 1, "spin"),
              ("1 reader polling the tail", 1, "read"), ("3 readers polling the tail", 3, "read")]


def run(writer_kind: str, n_others: int, other_kind: str | None, seconds: float) -> float:
    """Appends/s of one writer thread beside `n_others` threads of `other_kind`."""
    tmp = tempfile.mkdtemp(prefix="pylog-convoy-")
    log = Log(os.path.join(tmp, "t-0"), {"segment.bytes": 1 << 30, "retention.ms": -1})
    log.append(BATCH)                                   # the readers have something to read
    fd = os.open(os.path.join(tmp, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stop = threading.Event()
    appends = [0]

    def spin():
        x = 0
        while not stop.is_set():
            x += 1

    def read():
        offset = 0
        while not stop.is_set():
            got = log.read(offset, 4096).records()
            if got:
                offset = got[-1].offset + 1

    def write():
        append = log.append if writer_kind == "Log.append" else (lambda b: os.write(fd, b))
        while not stop.is_set():
            append(BATCH)
            appends[0] += 1

    target = spin if other_kind == "spin" else read
    threads = [threading.Thread(target=target) for _ in range(n_others)]
    threads.append(threading.Thread(target=write))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    os.close(fd)
    log.close()
    shutil.rmtree(tmp)
    return appends[0] / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=2, help="rounds, printed as min-max")
    ap.add_argument("--switch-interval", type=float, default=0.0005)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    default_si = sys.getswitchinterval()
    intervals = [default_si, args.switch_interval]
    results: dict[tuple, list[float]] = {}
    for _ in range(args.rounds):                         # rounds alternate every cell (VM drift)
        for si in intervals:
            sys.setswitchinterval(si)
            for name, n, kind in NEIGHBOURS:
                for writer in ("Log.append", "os.write"):
                    results.setdefault((si, name, writer), []).append(run(writer, n, kind, args.seconds))
    sys.setswitchinterval(default_si)

    def cell(si, name, writer):
        v = results[(si, name, writer)]
        return f"{min(v):,.0f}-{max(v):,.0f}"

    def ratio(si, name):
        a, w = results[(si, name, "Log.append")], results[(si, name, "os.write")]
        return f"{min(a) / max(w):.2f}-{max(a) / min(w):.2f}"

    print(f"# {time.strftime('%Y-%m-%d')} {platform.node()} {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, {args.rounds} rounds of {args.seconds} s, "
          f"{len(BATCH)} B batches")
    si_names = [f"{si * 1000:g} ms" for si in intervals]
    header = ["other threads"] + [f"{w} /s, switch {s}" for s in si_names
                                  for w in ("Log.append", "os.write")] + \
             [f"append / write, switch {s}" for s in si_names]
    rows = [[name] + [cell(si, name, w) for si in intervals for w in ("Log.append", "os.write")]
            + [ratio(si, name) for si in intervals] for name, _, _ in NEIGHBOURS]
    print(sc.table(header, rows, args.markdown))


if __name__ == "__main__":
    main()
