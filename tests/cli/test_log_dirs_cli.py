"""``pylog log-dirs``: describe a broker's log dirs and move a partition between them."""

from __future__ import annotations

import json

import pytest

import pylog

from .test_cli import run


@pytest.fixture
def jbod(tmp_path):
    dirs = [str(tmp_path / "disk1"), str(tmp_path / "disk2")]
    with pylog.open(dirs) as store, pylog.Broker(store, listen="127.0.0.1:0") as broker:
        yield store, broker.bootstrap_servers, dirs


def test_describe_and_move(jbod):
    store, bootstrap, dirs = jbod
    b = ["--bootstrap-server", bootstrap]
    store.create_topic("cli-moves", 2)
    store.log("cli-moves", 0).append_records([b"v%d" % i for i in range(500)])
    described = json.loads(run("log-dirs", *b, "--describe", "--topic-list", "cli-moves").stdout)
    [broker] = described["brokers"]
    by_dir = {d["logDir"]: d for d in broker["logDirs"]}
    assert sorted(by_dir) == sorted(dirs)
    assert {p["partition"]: (d, p["size"], p["isFuture"]) for d, e in by_dir.items()
            for p in e["partitions"]} == {
        f"cli-moves-{p}": (store.log_dir_of("cli-moves", p), store.log("cli-moves", p).size, False)
        for p in range(2)}
    assert all(d["error"] is None and d["usableBytes"] > 0 for d in broker["logDirs"])
    dest = next(d for d in dirs if d != store.log_dir_of("cli-moves", 0))
    out = run("log-dirs", *b, "--move", "cli-moves:0", "--to", dest).stdout
    assert f"Moved cli-moves-0 to {dest}." in out
    assert store.log_dir_of("cli-moves", 0) == dest
    assert store.log("cli-moves", 0).log_end_offset == 500
    refused = run("log-dirs", *b, "--move", "cli-moves:0", "--to", dest + "-nope", check=False)
    assert refused.returncode != 0 and "LOG_DIR_NOT_FOUND" in refused.stderr
