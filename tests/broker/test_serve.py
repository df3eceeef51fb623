"""`pylog serve` as the README shows it: the installed console script, a kcat producer
and consumer, a server.properties file, SIGTERM as a graceful shutdown (the store
closes cleanly: the next open needs no recovery)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pylog

from .conftest import need_kcat

README = Path(__file__).resolve().parents[2] / "README.md"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_shell_lines() -> list[str]:
    """The lines of the README's plain fenced block that runs `pylog serve`."""
    blocks, current = [], None
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = [] if line == "```" else False     # False: a ```python block
            else:
                if current is not False:
                    blocks.append(current)
                current = None
        elif current not in (None, False):
            current.append(line)
    block = next(b for b in blocks if any(line.startswith("pylog serve") for line in b))
    return [line.split("#")[0].strip() for line in block if line.strip()]


def test_readme_serve_and_kcat_lines_work(tmp_path):
    kcat = need_kcat()
    serve, produce, consume = readme_shell_lines()
    port = free_port()
    data = tmp_path / "pylog"
    serve = serve.replace("/data/pylog", str(data)).replace("9092", str(port))
    pylog_script = Path(sys.executable).parent / "pylog"      # the console script pip installed
    args = serve.split()
    assert args[0] == "pylog"
    proc = subprocess.Popen([str(pylog_script), *args[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in proc.stdout.readline()
        produce = produce.replace("9092", str(port)).replace("kcat ", kcat + " ", 1)
        subprocess.run(produce, shell=True, check=True, timeout=60)
        out = subprocess.run(consume.replace("9092", str(port)).replace("kcat ", kcat + " ", 1).split(),
                             check=True, timeout=60, capture_output=True, text=True).stdout
        assert out.split() == ["hello", "world"]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    assert code == 0, err
    assert "shutting down" in err and "Traceback" not in err
    with pylog.open(data) as store:
        assert [r.value for r in store.log("events", 0).read(0).records()] == [b"hello", b"world"]


def test_server_properties_and_overrides(tmp_path):
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(f"# Kafka's format\nlog.dirs={tmp_path / 'd1'},{tmp_path / 'd2'}\n"
                     f"listeners=PLAINTEXT://127.0.0.1:{port}\nnum.partitions=3\n"
                     "auto.create.topics.enable: true\nlog.segment.bytes=1048576\n")
    proc = subprocess.Popen([sys.executable, "-m", "pylog.cli", "serve", "--config", str(props),
                             "--override", "num.partitions=5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert f"127.0.0.1:{port}" in proc.stdout.readline()
        from pylog.protocol.client import ProtocolClient
        with ProtocolClient(f"127.0.0.1:{port}") as client:
            client.metadata(["auto"], allow_auto_create=True)
            assert len(client.metadata(["auto"]).topics[0].partitions) == 5
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        proc.stdout.close()
        proc.stderr.close()
    assert {p.name for p in (tmp_path / "d1").iterdir()} | {p.name for p in (tmp_path / "d2").iterdir()} \
        >= {f"auto-{i}" for i in range(5)}


def test_bad_config_is_named(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pylog.cli", "serve", "--log-dirs", str(tmp_path),
                          "--override", "socket.request.max.byte=10"], capture_output=True, text=True)
    assert run.returncode != 0
    assert "socket.request.max.byte" in run.stderr and "did you mean 'socket.request.max.bytes'" in run.stderr
