"""Child process for the resumed-move crash test: fills a partition (the first run) and
moves it to the other log dir while appending to it, or (a later run) opens the store, where
the interrupted move resumes by itself; either way it stops the move's copy at its
KILL_AT-th chunk for the parent to SIGKILL it.

Usage: python log_dir_move_resume_child.py DIR_A DIR_B KILL_AT

Every record's value is a pure function of its offset (``big_value``). After each append
returns, the child prints ``ack <last_offset>``; it prints ``open <log end> <source dir>
<moving: 0 or 1>`` once open, and ``stage chunk <n>`` when the copy reaches chunk KILL_AT
(then the copy waits there; the appends go on).
"""

import sys
import threading
import time

import pylog
from pylog.errors import NotLeaderOrFollowerError
from pylog.storage import log_dir_moves

TOPIC = "big"
SEGMENT_BYTES = 4 << 20
FILL_BYTES = 24 << 20
_out = threading.Lock()


def say(line: str) -> None:
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def big_value(offset: int) -> bytes:
    return (b"%d:" % offset) * (1 + offset % 7) + b"." * 1000


def main() -> None:
    dir_a, dir_b, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    chunks = [0]

    def hook(name: str) -> None:
        if name != "copy-chunk":
            return
        chunks[0] += 1
        if chunks[0] >= kill_at:
            say(f"stage chunk {chunks[0]}")
            while True:
                time.sleep(60)
    # Small chunks: the copy passes many points where it can be killed.
    log_dir_moves._CHUNK = 256 << 10
    log_dir_moves.stage_hook = hook          # (before the open: a resumed move copies at once)
    store = pylog.open([dir_a, dir_b], log_segment_bytes=SEGMENT_BYTES)
    first = TOPIC not in store.list_topics()
    if first:
        store.create_topic(TOPIC, 1)
    source = store.log_dir_of(TOPIC, 0)
    dest = dir_b if source == store.log_dirs[0] else store.log_dirs[0]
    write_lock = threading.Lock()

    def append_some(count: int) -> None:
        while True:
            lg = store.log(TOPIC, 0)
            with write_lock:
                start = lg.log_end_offset
                try:
                    info = lg.append_records([big_value(o) for o in range(start, start + count)])
                except NotLeaderOrFollowerError:
                    continue
            assert info.first_offset == start
            say(f"ack {info.last_offset}")
            return

    if first:
        while store.log(TOPIC, 0).size < FILL_BYTES:
            append_some(100)
    say(f"open {store.log(TOPIC, 0).log_end_offset} {source} "
        f"{0 if store.moving(TOPIC, 0) is None else 1}")

    def writer() -> None:
        while True:
            append_some(10)
    threading.Thread(target=writer, daemon=True).start()
    if first:
        store.alter_log_dir(TOPIC, 0, dest)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
