"""I/O engine: the portable (pwritev) and io_uring engines pass one suite.

Every behaviour test runs against both kinds; io_uring is skipped, with the
reason, when the build lacks it or the kernel/sandbox refuses a ring.
"""

import errno
import fcntl
import os
import random
import select
import subprocess
import sys
import textwrap
import threading

import pytest

from pylog._core.engine import IoEngine, uring_compiled

IOV_MAX = os.sysconf("SC_IOV_MAX")
MAX_RW_COUNT = 0x7FFFF000  # Linux caps one read/write at INT_MAX rounded down to a page


def _uring_skip_reason():
    if not uring_compiled():
        return "built without io_uring (liburing not found at build time)"
    try:
        IoEngine("io_uring")
    except OSError as exc:
        return f"io_uring cannot be set up here: {exc}"
    return None


URING_SKIP = _uring_skip_reason()
needs_uring = pytest.mark.skipif(URING_SKIP is not None, reason=str(URING_SKIP))
KINDS = ["portable", pytest.param("io_uring", marks=needs_uring)]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def engine(kind):
    return IoEngine(kind)


@pytest.fixture
def open_file(tmp_path):
    """open_file(name, flags=O_RDWR|O_CREAT) -> fd, closed after the test."""
    fds = []

    def opener(name="data", flags=os.O_RDWR | os.O_CREAT):
        fd = os.open(tmp_path / name, flags, 0o644)
        fds.append(fd)
        return fd

    yield opener
    for fd in fds:
        os.close(fd)


@pytest.fixture
def devnull():
    """A writable fd that does not support fsync (fdatasync fails with EINVAL)."""
    fd = os.open(os.devnull, os.O_WRONLY)
    yield fd
    os.close(fd)


def closed_fd(tmp_path):
    fd = os.open(tmp_path / "closed", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    return fd


def run_python(code, **env):
    """Runs `code` in a fresh interpreter; returns its stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)
    assert 0 == proc.returncode, proc.stderr
    return proc.stdout


class TestIoEngine:
    def test_kind_is_the_one_requested(self, kind):
        """An explicit kind is honoured and `why` says what was chosen."""
        engine = IoEngine(kind)
        assert kind == engine.kind
        assert engine.why.startswith("portable (pwritev)" if kind == "portable" else "io_uring (")
        assert kind in repr(engine)

    @needs_uring
    def test_auto_prefers_io_uring(self, monkeypatch):
        """"auto" picks io_uring when a ring can be set up."""
        monkeypatch.delenv("PYLOG_IO_ENGINE", raising=False)
        assert "io_uring" == IoEngine().kind

    def test_unknown_kind_names_the_allowed_ones(self):
        """A bad kind is a ValueError that lists the valid kinds."""
        with pytest.raises(ValueError, match="'auto', 'portable' or 'io_uring'"):
            IoEngine("uring")

    def test_queue_depth_below_two_is_rejected(self):
        """A write and its fdatasync share the ring, so it needs at least 2 entries."""
        with pytest.raises(ValueError, match="at least 2"):
            IoEngine("portable", queue_depth=1)

    def test_demanding_unavailable_io_uring_raises(self):
        """kind="io_uring" raises OSError with the reason when no ring can be made."""
        # The kernel refuses rings of more than 32768 entries (no IORING_SETUP_CLAMP).
        with pytest.raises(OSError, match="io_uring unavailable: "):
            IoEngine("io_uring", queue_depth=1 << 20)

    def test_auto_falls_back_to_portable_and_says_why(self, monkeypatch):
        """"auto" falls back to pwritev when no ring can be set up, with the reason."""
        monkeypatch.delenv("PYLOG_IO_ENGINE", raising=False)
        engine = IoEngine("auto", queue_depth=1 << 20)
        assert "portable" == engine.kind
        expected = ("portable (pwritev): io_uring_queue_init failed: Invalid argument"
                    if uring_compiled() else "portable (pwritev): built without io_uring")
        assert engine.why.startswith(expected)

    @pytest.mark.parametrize("env_kind", KINDS)
    def test_env_var_overrides_auto(self, env_kind):
        """PYLOG_IO_ENGINE picks the kind of IoEngine() and IoEngine("auto")."""
        out = run_python("""
            from pylog._core.engine import IoEngine
            print(IoEngine().kind, IoEngine("auto").kind)
            print(IoEngine().why)
        """, PYLOG_IO_ENGINE=env_kind)
        kinds, why = out.splitlines()
        assert f"{env_kind} {env_kind}" == kinds
        assert why.endswith(f"(PYLOG_IO_ENGINE={env_kind})")

    @needs_uring
    def test_explicit_kind_beats_env_var(self):
        """An explicit kind argument is not overridden by PYLOG_IO_ENGINE."""
        out = run_python("""
            from pylog._core.engine import IoEngine
            print(IoEngine("io_uring").kind)
        """, PYLOG_IO_ENGINE="portable")
        assert "io_uring" == out.strip()

    def test_bad_env_var_is_rejected(self):
        """A PYLOG_IO_ENGINE value that is not a kind is a ValueError naming the variable."""
        out = run_python("""
            from pylog._core.engine import IoEngine
            try:
                IoEngine()
            except ValueError as exc:
                print(exc)
        """, PYLOG_IO_ENGINE="fast")
        assert "PYLOG_IO_ENGINE='fast': expected 'auto', 'portable' or 'io_uring'" == out.strip()


class TestWritev:
    def test_writes_land_at_their_positions(self, engine, open_file):
        """Writes at scattered positions, with holes and overlaps, match a bytearray model."""
        fd = open_file()
        rng = random.Random(0)
        model = bytearray()
        for _ in range(50):
            pos = rng.randrange(0, 200_000)
            bufs = [rng.randbytes(rng.randrange(0, 5000)) for _ in range(rng.randrange(1, 6))]
            data = b"".join(bufs)
            assert len(data) == engine.writev(fd, bufs, pos)
            if len(model) < pos + len(data):
                model.extend(bytes(pos + len(data) - len(model)))
            model[pos:pos + len(data)] = data
        assert bytes(model) == os.pread(fd, len(model) + 1, 0)

    def test_more_than_iov_max_buffers_in_one_call(self, engine, open_file):
        """3 * IOV_MAX + 7 buffers (some empty) are written in order by one call."""
        fd = open_file()
        rng = random.Random(1)
        bufs = [rng.randbytes(rng.choice([0, 1, 7, 100, 513])) for _ in range(3 * IOV_MAX + 7)]
        data = b"".join(bufs)
        assert len(data) == engine.writev(fd, bufs, 4096)
        assert bytes(4096) + data == os.pread(fd, len(data) + 4097, 0)
        assert 1 == engine.stats()["writes"]
        assert len(data) == engine.stats()["bytes_written"]

    def test_nothing_to_write(self, engine, open_file):
        """No buffers, or only empty ones, write nothing and still succeed."""
        fd = open_file()
        assert 0 == engine.writev(fd, [], 0)
        assert 0 == engine.writev(fd, [b"", bytearray()], 100)
        assert 0 == os.fstat(fd).st_size

    def test_accepts_any_contiguous_buffer(self, engine, open_file):
        """bytes, bytearray, memoryview slices and array.array are all buffers."""
        import array

        fd = open_file()
        bufs = [b"ab", bytearray(b"cd"), memoryview(b"xxefxx")[2:4], array.array("B", b"gh")]
        assert 8 == engine.writev(fd, bufs, 0)
        assert b"abcdefgh" == os.pread(fd, 100, 0)

    def test_one_buffer_instead_of_a_sequence_is_a_type_error(self, engine, open_file):
        """Passing bytes where a sequence of buffers is expected is refused, not iterated."""
        with pytest.raises(TypeError, match="sequence of bytes-like objects"):
            engine.writev(open_file(), b"abc", 0)

    def test_datasync_flag_syncs(self, engine, open_file, devnull):
        """datasync=True fdatasyncs after the write: /dev/null accepts writes but not syncs."""
        assert 3 == engine.writev(devnull, [b"abc"], 0)
        with pytest.raises(OSError) as info:
            engine.writev(devnull, [b"abc"], 0, datasync=True)
        assert errno.EINVAL == info.value.errno
        fd = open_file()
        engine.writev(fd, [b"abc"], 0, datasync=True)
        assert b"abc" == os.pread(fd, 10, 0)
        assert {"writes": 2, "syncs": 1} == {k: engine.stats()[k] for k in ("writes", "syncs")}

    def test_datasync_without_data(self, engine, devnull):
        """An empty write with datasync=True still syncs."""
        with pytest.raises(OSError) as info:
            engine.writev(devnull, [], 0, datasync=True)
        assert errno.EINVAL == info.value.errno

    def test_closed_fd_is_ebadf(self, engine, tmp_path):
        """A closed fd fails with EBADF, for plain and synced writes."""
        fd = closed_fd(tmp_path)
        for datasync in (False, True):
            with pytest.raises(OSError) as info:
                engine.writev(fd, [b"x"], 0, datasync=datasync)
            assert errno.EBADF == info.value.errno
        assert 0 == engine.stats()["writes"]

    def test_read_only_fd_is_ebadf(self, engine, open_file):
        """An fd opened O_RDONLY fails with EBADF and the file is unchanged."""
        open_file("ro")
        fd = open_file("ro", os.O_RDONLY)
        with pytest.raises(OSError) as info:
            engine.writev(fd, [b"x" * 10, b"y"], 0, datasync=True)
        assert errno.EBADF == info.value.errno
        assert 0 == os.fstat(fd).st_size

    def test_negative_position_is_einval(self, engine, open_file):
        """A negative position is EINVAL (io_uring would read it as "current position")."""
        with pytest.raises(OSError) as info:
            engine.writev(open_file(), [b"x"], -1)
        assert errno.EINVAL == info.value.errno

    def test_short_write_is_resumed(self, engine, devnull):
        """A write the kernel cuts at MAX_RW_COUNT, mid-buffer, is resumed to the end."""
        buf = bytes(3 << 20)  # 1024 of these are one 3 GiB piece: cut at 2 GiB - 4 KiB
        assert IOV_MAX * len(buf) == engine.writev(devnull, [buf] * IOV_MAX, 0)
        stats = engine.stats()
        assert IOV_MAX * len(buf) == stats["bytes_written"]
        assert 1 <= stats["short_writes"]

    def test_short_write_then_error_leaves_the_prefix(self, kind, tmp_path):
        """Under RLIMIT_FSIZE the write is cut short, resumed, then fails with EFBIG;
        exactly the allowed prefix is on disk and the short write is counted."""
        path = tmp_path / "limited"
        out = run_python(f"""
            import os, resource, signal
            from pylog._core.engine import IoEngine
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            engine = IoEngine({kind!r})
            fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)
            resource.setrlimit(resource.RLIMIT_FSIZE, (6500, resource.RLIM_INFINITY))
            try:
                engine.writev(fd, [bytes([i]) * 1000 for i in range(10)], 0, datasync=True)
            except OSError as exc:
                print(exc.errno, engine.stats()["short_writes"], engine.stats()["syncs"])
        """)
        assert f"{errno.EFBIG} 1 0" == out.strip()
        assert b"".join(bytes([i]) * 1000 for i in range(7))[:6500] == path.read_bytes()

    @pytest.mark.slow
    @pytest.mark.xdist_group("writeback")        # 2 GiB dirtied: not beside the cachestat tests
    def test_resumed_write_lands_in_place(self, engine, open_file):
        """After a cut at MAX_RW_COUNT, the resumed bytes continue exactly where it stopped."""
        fd = open_file()
        # 1024 units are just over MAX_RW_COUNT, which falls 1030 bytes into unit 1022.
        unit = (bytes(range(251)) * 8372)[:2_101_251]
        expected_len = IOV_MAX * len(unit)
        assert expected_len == engine.writev(fd, [unit] * IOV_MAX, 0)
        assert expected_len == os.fstat(fd).st_size
        for pos in (0, MAX_RW_COUNT - 4096, MAX_RW_COUNT - 17, expected_len - 9000):
            start = pos % len(unit)
            want = (unit[start:] + unit)[:8192]
            assert want == os.pread(fd, 8192, pos)
        assert 1 <= engine.stats()["short_writes"]


class TestSync:
    def test_many_fds(self, engine, open_file):
        """Syncing 200 fds at once, data and full, succeeds and counts every fd."""
        fds = [open_file(f"f{i}") for i in range(200)]
        for i, fd in enumerate(fds):
            os.write(fd, b"%d" % i)
        engine.sync(fds)
        engine.sync(fds, full=True)
        assert 400 == engine.stats()["syncs"]

    def test_no_fds(self, engine):
        """Syncing nothing succeeds."""
        engine.sync([])
        assert 0 == engine.stats()["syncs"]

    def test_every_fd_is_tried_and_the_first_error_wins(self, engine, open_file, devnull,
                                                        tmp_path):
        """Failures do not stop the others; the error is that of the first failing fd."""
        good = [open_file(f"g{i}") for i in range(3)]
        fds = [good[0], devnull, good[1], closed_fd(tmp_path), good[2]]
        for full in (False, True):
            with pytest.raises(OSError) as info:
                engine.sync(fds, full=full)
            assert errno.EINVAL == info.value.errno
        assert 6 == engine.stats()["syncs"]
        with pytest.raises(OSError) as info:
            engine.sync(fds[3:])
        assert errno.EBADF == info.value.errno


class TestConcurrency:
    @pytest.mark.parametrize("queue_depth", [2, 64])
    def test_threads_share_one_engine(self, kind, queue_depth, open_file):
        """8 threads write disjoint regions of one file through one engine, with
        occasional fdatasyncs and syncs; every byte lands (a ring of 2 forces waits)."""
        engine = IoEngine(kind, queue_depth=queue_depth)
        fd = open_file()
        nthreads, region = 8, 256 * 1024
        start = threading.Barrier(nthreads)
        errors = []
        calls = [0] * nthreads

        def worker(t):
            try:
                rng = random.Random(t)
                start.wait()
                pos = t * region
                while pos < (t + 1) * region:
                    n = min(rng.randrange(1, 9000), (t + 1) * region - pos)
                    data = bytes([t + 1]) * n
                    cut = rng.randrange(0, n + 1)
                    engine.writev(fd, [data[:cut], data[cut:]], pos, datasync=rng.random() < 0.05)
                    calls[t] += 1
                    if rng.random() < 0.02:
                        engine.sync([fd], full=rng.random() < 0.5)
                    pos += n
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [] == errors
        expected = b"".join(bytes([t + 1]) * region for t in range(nthreads))
        assert expected == os.pread(fd, len(expected) + 1, 0)
        stats = engine.stats()
        assert sum(calls) == stats["writes"]
        assert len(expected) == stats["bytes_written"]


def full_pipe():
    """(read fd, write fd) of a pipe of one page, already full: a write to it
    stays in the kernel until the read end is drained."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(w, False)
    filled = 0
    try:
        while True:
            filled += os.write(w, b"P" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w, filled


def drain(fd, quiet_s):
    """Everything readable from `fd` until nothing came for `quiet_s` seconds."""
    got = bytearray()
    while select.select([fd], [], [], quiet_s)[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        got += chunk
    return bytes(got)


@needs_uring
class TestBrokenRing:
    """A ring that fails for good (IoEngine._inject_fault makes the next submit or
    wait fail as the kernel would) takes the engine out of service, not the process."""

    def test_a_caller_returns_only_after_the_kernel_is_done_with_its_buffer(self):
        """The wait for completions fails while the kernel holds the caller's write
        (to a full pipe): the call still returns only after that write completed, so
        the caller's reuse of its buffer afterwards never reaches the kernel. (Before,
        it returned at once, and the pipe then received the reused buffer's zeros.)"""
        engine = IoEngine("io_uring")
        r, w, filled = full_pipe()
        pattern = bytes(range(256)) * 1024
        buf = bytearray(pattern)
        outcome = []

        def writer():
            try:
                outcome.append(engine.writev(w, [buf], 0, datasync=True))
            except OSError as exc:
                outcome.append(exc)
            buf[:] = bytes(len(buf))  # the call returned: the buffer is the caller's again

        engine._inject_fault("wait", errno.EIO)
        thread = threading.Thread(target=writer)
        try:
            thread.start()
            thread.join(0.5)
            still_waiting = thread.is_alive()
            got = drain(r, quiet_s=1.0)
            thread.join(30)
        finally:
            os.close(r)
            os.close(w)
        assert still_waiting, f"returned {outcome} while the kernel held its write"
        assert b"P" * filled == got[:filled]
        assert len(got) > filled
        assert pattern[:len(got) - filled] == got[filled:]
        assert not thread.is_alive()
        assert isinstance(outcome[0], OSError) and errno.EIO == outcome[0].errno

    def test_after_the_break_every_call_fails_at_once(self, open_file):
        """The call whose wait failed gets the kernel's own results (read from the
        completion ring); then the engine stays out of service: writes and syncs
        fail with the ring's error."""
        engine = IoEngine("io_uring")
        fd = open_file()
        engine._inject_fault("wait", errno.EIO)
        assert 3 == engine.writev(fd, [b"abc"], 0, datasync=True)
        assert b"abc" == os.pread(fd, 8, 0)
        for call in (lambda: engine.writev(fd, [b"x"], 3, datasync=True),
                     lambda: engine.sync([fd])):
            with pytest.raises(OSError) as info:
                call()
            assert errno.EIO == info.value.errno

    def test_sqes_the_kernel_did_not_take_fail_at_once(self, open_file):
        """A submit that fails for good completes the SQEs it did not hand over with its
        error: nothing is written and the call does not wait."""
        engine = IoEngine("io_uring")
        fd = open_file()
        engine._inject_fault("submit", errno.ENOMEM)
        with pytest.raises(OSError) as info:
            engine.writev(fd, [b"abc"], 0, datasync=True)
        assert errno.ENOMEM == info.value.errno
        assert 0 == os.fstat(fd).st_size
        with pytest.raises(OSError) as info:
            engine.sync([fd])
        assert errno.ENOMEM == info.value.errno

    def test_fault_points_are_checked(self):
        """Only an io_uring engine takes faults, at a known point."""
        with pytest.raises(ValueError, match="unknown fault point"):
            IoEngine("io_uring")._inject_fault("read", errno.EIO)
        with pytest.raises(OSError):
            IoEngine("portable")._inject_fault("wait", errno.EIO)


class TestStats:
    def test_counters_move(self, engine, open_file):
        """Each counter counts what it says; submissions only for io_uring."""
        fd = open_file()
        assert {"writes": 0, "bytes_written": 0, "syncs": 0, "submissions": 0,
                "short_writes": 0} == engine.stats()
        engine.writev(fd, [b"abc", b"de"], 0)
        engine.writev(fd, [b"f"], 5, datasync=True)
        engine.sync([fd, fd])
        stats = engine.stats()
        assert {"writes": 2, "bytes_written": 6, "syncs": 3, "short_writes": 0} == \
            {k: v for k, v in stats.items() if k != "submissions"}
        if engine.kind == "io_uring":
            assert 2 == stats["submissions"]  # the write+fdatasync chain, both syncs (plain writes: pwritev)
        else:
            assert 0 == stats["submissions"]
