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

:func:`freeze_heap`, the other process-wide choice here, keeps the objects a server
made at start-up out of the cyclic collector's full passes (``pylog serve`` only).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["freeze_heap", "tune_malloc"]

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


def freeze_heap() -> int:
    """Collects, then moves every object the process holds to the cyclic collector's
    permanent generation (``gc.freeze``); returns how many were frozen.

    A full pass of CPython's collector walks every object it tracks while holding the
    GIL, so its pause grows with the heap: a served store's modules, classes, config and
    partitions are tens of thousands of objects that live as long as the process, walked
    again on every full pass on the event loop (bench/RESULTS.md, "joins-parked"). Frozen,
    they are never walked again. Process-wide, so the library never does this on import:
    ``pylog serve`` calls it once the broker is up. The price: an object frozen here
    that later dies inside a reference cycle is never freed (reference counting still
    frees the rest), which bounds the leak by the heap at the call."""
    import gc
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
