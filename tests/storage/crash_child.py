"""Child process for the crash tests: appends forever, reporting acknowledged offsets.

Usage: python crash_child.py LOG_DIR ENGINE FLUSH_MESSAGES SEED
   or: python crash_child.py --forks (``serve_forks``: one child per line of stdin)

Every record's value is a pure function of its offset (``expected_value``),
so the parent can check any record it finds after the kill. After each
append whose records are covered by an fsync (``AppendInfo.flushed``), the
child prints ``ack <last_offset>`` and flushes stdout: those records must
survive the SIGKILL that ends it.
"""

import os
import random
import sys
import threading

from pylog import records
from pylog.storage.log import Log


def expected_value(offset: int) -> bytes:
    return (b"%d:" % offset) * (1 + offset % 7)


def main(args: list[str]) -> None:
    log_dir, engine, flush_messages, seed = args[0], args[1], int(args[2]), int(args[3])
    rng = random.Random(seed)
    log = Log(log_dir, {"pylog.io.engine": engine, "flush.messages": flush_messages,
                        "segment.bytes": 256 * 1024, "index.interval.bytes": 4096})
    print(f"open {log.log_end_offset} {log.recovery.bytes_truncated}", flush=True)
    while True:
        start = log.log_end_offset
        count = rng.randint(1, 50)
        values = [expected_value(o) for o in range(start, start + count)]
        info = log.append(records.encode_batch(values, compression=rng.choice(["none", "none", "lz4"])))
        assert info.first_offset == start
        if info.flushed:
            print(f"ack {info.last_offset}", flush=True)


def serve_forks() -> None:
    """Starts each crash round's child by fork(2) from this process, which has imported
    pylog once, instead of a new interpreter per round (the import was most of a round's
    time). Each stdin line ``LOG_DIR ENGINE FLUSH_MESSAGES SEED OUT`` forks a child that
    runs ``main`` with its stdout and stderr on the file OUT; this prints ``pid N`` at the
    fork and ``exit STATUS`` (``os.waitpid``'s) once the child has ended. No thread runs
    here when it forks, and no Log is open: the child starts as a fresh process would."""
    for line in sys.stdin:
        *args, out = line.split()
        assert threading.active_count() == 1
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                main(args)
            finally:
                os._exit(1)
        print(f"pid {pid}", flush=True)
        print(f"exit {os.waitpid(pid, 0)[1]}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--forks"]:
        serve_forks()
    else:
        main(sys.argv[1:])
