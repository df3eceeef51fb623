"""Child process for the log-dir move crash tests: appends to a partition while moving it
to another log dir, and stops at one step of the move for the parent to SIGKILL it.

Usage: python log_dir_move_child.py DIR_A DIR_B STAGE

Every record's value is a pure function of its offset (``expected_value``). After each
append returns, the child prints ``ack <last_offset>`` (a SIGKILL loses no page-cache
data, so every acknowledged record must survive it). When the move reaches STAGE
(log_dir_moves.stage_hook's names, or "none": never stop), the child prints
``stage <name> <source dir> <destination dir>`` and waits there forever; at "copy-pass"
the appends go on meanwhile, at the swap's steps they wait for the partition's lock.
"""

import sys
import threading
import time

import pylog
from pylog.errors import NotLeaderOrFollowerError
from pylog.storage import log_dir_moves


_out = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout (print from two threads may interleave its parts)."""
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def expected_value(offset: int) -> bytes:
    return (b"%d:" % offset) * (1 + offset % 5)


def main() -> None:
    dir_a, dir_b, stop_at = sys.argv[1], sys.argv[2], sys.argv[3]
    store = pylog.open([dir_a, dir_b], log_segment_bytes=32 * 1024)
    if "moving" not in store.list_topics():
        store.create_topic("moving", 1)
    source = store.log_dir_of("moving", 0)
    dest = dir_b if source == store.log_dirs[0] else store.log_dirs[0]
    say(f"open {store.log('moving', 0).log_end_offset} {source}")
    write_lock = threading.Lock()     # one append at a time: values follow offsets

    def append_some(count: int) -> None:
        while True:
            lg = store.log("moving", 0)
            with write_lock:
                start = lg.log_end_offset
                try:
                    info = lg.append_records([expected_value(o) for o in range(start, start + count)])
                except NotLeaderOrFollowerError:
                    continue            # moved under us: the next store.log() is the new one
            assert info.first_offset == start
            say(f"ack {info.last_offset}")
            return

    for _ in range(300):                   # several segments before the move
        append_some(20)
    passes = [0]

    def hook(name: str) -> None:
        if name == "copy-pass":
            passes[0] += 1
            if passes[0] < 2:
                return
        if name == stop_at:
            say(f"stage {name} {source} {dest}")
            while True:
                time.sleep(60)
    log_dir_moves.stage_hook = hook
    # A small swap threshold: the copy takes passes (at most 5) while the appends go on.
    log_dir_moves.SWAP_WHEN_BELOW = 1024
    log_dir_moves.MAX_PASSES = 5

    def writer() -> None:
        while True:
            append_some(7)
    threading.Thread(target=writer, daemon=True).start()
    store.alter_log_dir("moving", 0, dest)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
