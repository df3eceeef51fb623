"""A descriptor is never closed under a GIL-free read (issue 12, item 5).

Log.read takes no lock while close, truncate_to or retention close segment
files; the C walkers and sendfile run without the GIL, possibly over many
syscalls, and a closed descriptor number is reused by the next open at once,
so a read could have returned another file's bytes. LogFile now counts its
GIL-free users: close() during a use only marks the file, and the last use
closes it.
"""

import os
import socket
import threading
import time

import pytest
from log_support import wait_until

from pylog import records
from pylog.errors import OffsetOutOfRangeError
from pylog.storage.log import Log


def test_close_during_a_sendfile_waits_for_it(log_dir):
    log = Log(log_dir)
    payload = [os.urandom(1000) for _ in range(8000)]            # ~8 MB in one segment
    for i in range(0, len(payload), 500):
        log.append(records.encode_batch(payload[i:i + 500]))
    whole = log.read(0, 1 << 30)
    expected = whole.read()
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sent = []
    sender = threading.Thread(target=lambda: sent.append(whole.send_to(a)))
    sender.start()
    # The sender is inside send_to (it cannot finish: nobody reads the 4 KiB buffer).
    assert wait_until(lambda: whole.file.users == 1)
    whole.file.close()                               # e.g. retention's delayed close
    assert whole.file.closed and whole.file.users == 1
    others = [open(os.devnull, "rb") for _ in range(4)]   # would take the closed fd number
    got = bytearray()
    while len(got) < len(expected):
        chunk = b.recv(1 << 20)
        assert chunk
        got += chunk
    sender.join(10)
    assert sent == [len(expected)] and bytes(got) == expected
    assert whole.file.users == 0
    with pytest.raises(ValueError, match="closed"):
        whole.read()
    for f in others:
        f.close()
    a.close()
    b.close()
    log.abandon()                                    # its active file was closed by hand


def test_reads_race_retention_truncation_and_close(log_dir):
    """Readers hammer the log while retention deletes segments and truncation cuts it:
    every record returned is the one written at its offset."""
    config = {"segment.bytes": 20_000, "file.delete.delay.ms": 0, "retention.bytes": 100_000}
    log = Log(log_dir, config)
    value_of = {}

    def write(n):
        start = log.log_end_offset
        values = [b"%010d" % (start + i) + os.urandom(90) for i in range(n)]
        log.append(records.encode_batch(values))
        for i, v in enumerate(values):
            value_of[start + i] = v
    for _ in range(50):
        write(50)
    stop = threading.Event()
    problems = []

    def reader():
        while not stop.is_set():
            try:
                offset = max(log.log_start_offset, log.log_end_offset - 2000)
                for r in log.read(offset, 64 * 1024).records():
                    if r.value[:10] != b"%010d" % r.offset:
                        problems.append(f"offset {r.offset} returned {r.value[:10]!r}")
            except (OffsetOutOfRangeError, ValueError):
                pass                    # retention moved the start, or the file closed
    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        write(50)
        log.apply_retention()
        if log.log_end_offset % 7 == 0:
            log.truncate_to(log.log_end_offset - 10)
    stop.set()
    for t in threads:
        t.join(10)
    log.close()
    assert problems == []
