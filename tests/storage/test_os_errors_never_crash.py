"""No OS error crashes the host process (issue 12, item 8): a failed index remap
leaves an index that reads as empty, never a NULL mapping with entries."""

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, resource, sys
    from pylog._core.storage import OffsetIndex
    path = sys.argv[1]
    ix = OffsetIndex.open(path, 0, 8 * 1024)
    for i in range(100):
        ix.append(i * 10, i * 100)
    assert ix.lookup(555) == (550, 5500)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (8 << 20), resource.RLIM_INFINITY))
    try:
        ix.resize(64 << 20)               # the new mapping cannot be made
    except OSError as exc:
        print("resize failed:", exc.errno, flush=True)
    else:
        print("resize worked", flush=True)
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print("lookup", ix.lookup(555), "entries", ix.entries, flush=True)
    ix.close()
""")


def test_a_failed_index_remap_reads_as_empty(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "0.index")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    assert "resize failed: 12" in out.stdout          # ENOMEM from mmap
    assert "lookup (0, 0) entries 0" in out.stdout    # falls back to the segment start


def test_a_failed_sync_names_its_own_errno(tmp_path):
    """LogFile.sync and write_behind read errno right after the failing call, before
    the end of the call's use of the descriptor (which may close it) can change it:
    fdatasync of a FIFO is EINVAL and sync_file_range of one is ESPIPE, each with
    the file's path."""
    import errno
    import os

    import pytest
    from pylog._core.storage import LogFile

    path = tmp_path / "fifo"
    os.mkfifo(path)
    lf = LogFile(str(path))
    try:
        for full in (False, True):
            with pytest.raises(OSError) as info:
                lf.sync(full=full)
            assert (errno.EINVAL, str(path)) == (info.value.errno, info.value.filename)
        with pytest.raises(OSError) as info:
            lf.write_behind(0, 4096)
        assert (errno.ESPIPE, str(path)) == (info.value.errno, info.value.filename)
    finally:
        lf.close()
