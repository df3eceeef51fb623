"""glibc's malloc thresholds for a process that moves big buffers through many threads.

glibc serves an allocation above ``M_MMAP_THRESHOLD`` (128 KiB, raised dynamically up to
32 MiB on the main arena only) with a fresh ``mmap`` and returns it with ``munmap``, and
gives a thread arena's free top back to the kernel (``MADV_DONTNEED``) past
``M_TRIM_THRESHOLD``. An encoded batch of 10,000 records or a decoded MiB is such a
buffer: every call then touches new pages (a page fault each; a host fault on a VM), and
the ``munmap`` of one thread sends a TLB shootdown to the CPUs running the others
(bench/RESULTS.md, "tune_malloc", has what it gives).

:func:`tune_malloc` raises both thresholds for the whole process. It is a process-wide
choice, so the library never makes it on import: ``pylog serve``, ``pylog perf`` and the
benchmarks call it, and an application may. Memory freed stays in the process (up to
the trim threshold per arena) instead of going back to the kernel at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["tune_malloc"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20) -> str:
    """Raises glibc's mmap threshold (to its maximum on 64-bit, 32 MiB) and trim
    threshold; returns what was done (a sentence).

    An environment that already set ``MALLOC_MMAP_THRESHOLD_`` or
    ``MALLOC_TRIM_THRESHOLD_`` wins; ``PYLOG_KEEP_MALLOC=1`` turns this off. Does
    nothing where the C library is not glibc."""
    if os.environ.get("PYLOG_KEEP_MALLOC") == "1":
        return "malloc left as it is (PYLOG_KEEP_MALLOC=1)"
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return "malloc thresholds from the environment (MALLOC_*_)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "not glibc: malloc left as it is"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and
            mallopt(_M_TRIM_THRESHOLD, trim_threshold)):
        return "mallopt refused the thresholds: malloc left as it is"
    return (f"malloc: mmap threshold {mmap_threshold >> 20} MiB, trim threshold "
            f"{trim_threshold >> 20} MiB (pylog.common.memory.tune_malloc)")
