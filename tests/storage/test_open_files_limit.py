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
