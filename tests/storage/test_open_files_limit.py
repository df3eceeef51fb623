"""Running out of file descriptors, through a real RLIMIT_NOFILE set in a child
process (issue 12, item 16; issue "A broker that survives its clients", item 4).

A store with more partitions than the limit holds used to refuse to open ("too many
open files"); now it opens, serves the partitions that fit (internal topics first,
then whole topics from the smallest) and keeps the others offline with a reason that
names the limit; a higher limit and a reopen bring them back. A creation that does
not fit is refused before anything is written, and no dir goes offline for it."""

import resource
import subprocess
import sys
import textwrap

from pylog import records
from pylog.storage import LogManager


def run_child(code: str, *args: str, nofile: tuple[int, int] | None = None) -> dict[str, str]:
    """Runs `code` in a child process under RLIMIT_NOFILE `nofile` (soft, hard); returns
    its output lines as {first word: rest}."""
    limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                         text=True, timeout=120, preexec_fn=limit)
    assert out.returncode == 0, out.stderr
    return dict((line.split(" ", 1) + [""])[:2] for line in out.stdout.splitlines())


REOPEN = """
    import sys
    from pylog.errors import KafkaStorageError
    from pylog.storage import LogManager
    with LogManager(sys.argv[1], dict(a.split("=") for a in sys.argv[2:]), background=False) as m:
        online = {t: [p for p in range(m.partition_count(t)) if m.describe_topic(t).partitions[p].online]
                  for t in ("a", "b")}
        print("online", online["a"] == [0, 1], len(online["b"]), online["b"] == list(range(len(online["b"]))))
        print("a", [m.log("a", p).read(0).records()[0].value.decode() for p in (0, 1)])
        try:
            print("b59", m.log("b", 59).log_end_offset)
        except KafkaStorageError as exc:
            print("b59", exc.code, exc)
        print("offline", m.offline_log_dirs, m.startup.offline_partitions)
"""


def test_a_store_with_more_partitions_than_descriptors_opens_and_serves_the_rest(tmp_path):
    store = str(tmp_path / "store")
    with LogManager(store, background=False) as m:
        m.create_topic("b", 60)
        m.create_topic("a", 2)
        for p in range(2):
            m.log("a", p).append(records.encode_batch([b"a%d" % p]))
        m.log("b", 59).append(records.encode_batch([b"kept"]))
    # 128 descriptors: a quarter for inactive segments, 16 reserved, three per partition.
    got = run_child(REOPEN, store, "pylog.open.files.reserve=16", nofile=(128, 128))
    whole_a, fitting_b, prefix = got["online"].split()
    assert whole_a == "True" and prefix == "True" and 10 < int(fitting_b) < 60
    assert got["a"] == "['a0', 'a1']"
    assert got["b59"].startswith("56 ")
    assert "partition b-59 is offline: it was not opened at start-up" in got["b59"]
    assert "open-files limit is 128 (ulimit -n)" in got["b59"] and "raise ulimit -n" in got["b59"]
    assert got["offline"] == f"{{}} {60 - int(fitting_b)}"           # no log dir went offline
    # A higher limit: everything is back, nothing was lost.
    got = run_child(REOPEN, store, nofile=(1024, 1024))
    assert got["online"] == "True 60 True" and got["offline"] == "{} 0" and got["b59"] == "1"
    with LogManager(store, background=False) as m:
        assert m.log("b", 59).read(0).records()[0].value == b"kept"


CREATE = """
    import os, sys
    from pylog.errors import PolicyViolationError
    from pylog.storage import LogManager
    m = LogManager(sys.argv[1], background=False)
    m.create_topic("old", 1)
    try:
        m.create_topic("u", 400)
    except PolicyViolationError as exc:
        print("refused", exc.code, exc)
    print("dirs", sorted(e for e in os.listdir(sys.argv[1]) if e.startswith("u-")))
    print("topics", m.list_topics())
    m.log("old", 0).append(open(sys.argv[2], "rb").read())
    print("appended", m.log("old", 0).log_end_offset, m.offline_log_dirs)
    m.close()
"""


def test_a_creation_beyond_the_descriptors_is_refused_before_anything_is_written(tmp_path):
    batch = tmp_path / "batch"
    batch.write_bytes(records.encode_batch([b"x"]))
    got = run_child(CREATE, str(tmp_path / "store"), str(batch), nofile=(1024, 1024))
    assert got["refused"].startswith("44 400 partitions need 1200 more open files (3 each: ")
    assert "open-files limit is 1024 (ulimit -n)" in got["refused"]
    assert got["dirs"] == "[]" and got["topics"] == "['old']"
    assert got["appended"] == "1 {}"


RAISE = """
    import resource, sys
    from pylog.storage import LogManager
    LogManager(sys.argv[1], dict(a.split("=") for a in sys.argv[2:]), background=False).close()
    print("limit", *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def test_the_soft_limit_is_raised_to_the_hard_limit_at_open(tmp_path):
    """As the JVM does for Kafka (-XX:+MaxFDLimit): ulimit -Sn 256 with a hard 4096."""
    store = str(tmp_path / "store")
    assert run_child(RAISE, store, nofile=(256, 4096))["limit"] == "4096 4096"
    assert run_child(RAISE, store, "pylog.raise.open.files.limit=false",
                     nofile=(256, 4096))["limit"] == "256 4096"


MANY = textwrap.dedent("""
    import os, resource, sys
    from pylog import records
    from pylog.storage import LogManager
    from pylog.storage.segment import open_segments
    path, partitions, per = sys.argv[1], 4, 150
    with LogManager(path, background=False) as m:
        m.create_topic("t", partitions, {"segment.bytes": 200})
        for p in range(partitions):
            log = m.log("t", p)
            for i in range(per):
                log.append(records.encode_batch([b"%d" % i * 30]))
    segments = partitions * per
    limit = 128                      # far fewer descriptors than segments
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    def fds():
        return len(os.listdir("/proc/self/fd"))
    def index_maps():
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if line.rstrip().endswith(("index", "timeindex")))
    with LogManager(path, {"pylog.open.files.reserve": 16}, background=False) as m:
        print("segments", sum(len(m.log("t", p).segments) for p in range(partitions)))
        print("open_after_start", fds(), index_maps())
        peak_fds = peak_maps = 0
        for p in range(partitions):      # every segment read, index lookups included
            log = m.log("t", p)
            offset = 0
            while offset < log.log_end_offset:
                got = log.read(offset, 1)
                values = [r.value for r in got.records()]
                assert values == [b"%d" % offset * 30], (p, offset, values)
                offset = got.last_offset + 1
                peak_fds, peak_maps = max(peak_fds, fds()), max(peak_maps, index_maps())
            assert log.offset_for_timestamp(0).offset == 0
        print("peak", peak_fds, peak_maps, len(open_segments), open_segments.limit())
""")


def test_many_more_segments_than_descriptors(tmp_path):
    """Inactive segments open their files on demand and close them beyond a bound
    (a quarter of the open-files limit), so a store with many more segments than
    descriptors opens and reads everything (Kafka needs one per segment)."""
    out = subprocess.run([sys.executable, "-c", MANY, str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: [int(x) for x in line.split()[1:]] for line in out.stdout.splitlines()}
    assert lines["segments"][0] > 500                         # ~5x the descriptors allowed
    fds_at_start, maps_at_start = lines["open_after_start"]
    assert fds_at_start < 40 and maps_at_start <= 8            # the 4 active segments' files
    peak_fds, peak_maps, still_open, bound = lines["peak"]
    assert bound == 32 and still_open <= bound
    assert peak_fds < 128 and peak_maps <= 2 * bound + 8
