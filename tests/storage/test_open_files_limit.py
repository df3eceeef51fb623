"""Running out of file descriptors, through a real RLIMIT_NOFILE (issue 12,
item 16): at start-up it was reported as "every log dir is offline" with no
hint; now both start-up and run time say "too many open files (limit N):
raise ulimit -n", and no dir goes offline for it."""

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, resource, sys
    from pylog import records
    from pylog.errors import KafkaStorageError
    from pylog.storage import LogManager
    path = sys.argv[1]
    with LogManager(path, background=False) as m:
        m.create_topic("t", 20, {"segment.bytes": 200})
        for p in range(20):
            for i in range(5):
                m.log("t", p).append(records.encode_batch([b"x" * 100]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 1024))
    try:
        LogManager(path, background=False)
    except KafkaStorageError as exc:
        print("startup:", exc)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    m = LogManager(path, background=False)
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 2, 1024))   # no room for a new topic
    try:
        m.create_topic("u", 10)
    except KafkaStorageError as exc:
        print("runtime:", exc)
    print("offline:", m.offline_log_dirs)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    m.close()
""")


def test_too_many_open_files_names_the_limit(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert "too many open files (limit 40): raise ulimit -n" in lines["startup"]
    assert "offline" not in lines["startup"]
    assert "too many open files (limit " in lines["runtime"] and "raise ulimit -n" in lines["runtime"]
    assert lines["offline"] == "{}"


MANY = textwrap.dedent("""
    import os, resource, sys
    from pylog import records
    from pylog.storage import LogManager
    from pylog.storage.segment import open_segments
    path, partitions, per = sys.argv[1], 4, 300
    with LogManager(path, background=False) as m:
        m.create_topic("t", partitions, {"segment.bytes": 200})
        for p in range(partitions):
            log = m.log("t", p)
            for i in range(per):
                log.append(records.encode_batch([b"%d" % i * 30]))
    segments = partitions * per
    limit = 128                      # far fewer descriptors than segments
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, 4096))
    def fds():
        return len(os.listdir("/proc/self/fd"))
    def index_maps():
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if line.rstrip().endswith(("index", "timeindex")))
    with LogManager(path, background=False) as m:
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
    assert lines["segments"][0] > 1000                        # ~10x the descriptors allowed
    fds_at_start, maps_at_start = lines["open_after_start"]
    assert fds_at_start < 40 and maps_at_start <= 8            # the 4 active segments' files
    peak_fds, peak_maps, still_open, bound = lines["peak"]
    assert bound == 32 and still_open <= bound
    assert peak_fds < 128 and peak_maps <= 2 * bound + 8
