"""The tuning rig's report job (tuning/report.py) on a small recorded result set
(tests/data/tuning/results.jsonl: a real tiny matrix run and a quick seeds run of
this machine): the rows go into a pylog topic as the rig writes them, Spark reads
them through pylog's source, and the report has the tables, verdicts and plots."""

from __future__ import annotations

import json
import os

import pylog
from tuning.report import write_report

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "tuning", "results.jsonl")


def load_rows():
    with open(DATA) as f:
        return [json.loads(line) for line in f]


def test_report_from_recorded_results(spark, tmp_path):
    rows = load_rows()
    results = tmp_path / "results"
    with pylog.open(str(results / "store")) as store:
        store.create_topic("tuning-results", 1)
        log = store.log("tuning-results", 0)
        for r in rows:
            log.append_records([json.dumps(r).encode()], keys=[r["config"].encode()])
    out = tmp_path / "docs" / "TUNING.md"
    plots = tmp_path / "docs" / "tuning"
    got = write_report([str(results / "store")], str(out), str(plots), spark=spark)

    matrix = [r for r in rows if r["suite"] == "matrix"]
    configs = {r["config"] for r in matrix}
    assert len(got["rows"]) == len(configs)
    # Spark's median of each configuration equals one computed here (two repeats:
    # percentile_approx takes the lower one).
    for agg in got["rows"]:
        mine = sorted(r["pylog"]["mb_per_sec"] for r in matrix if r["config"] == agg["config"])
        assert agg["mbs"] == mine[0] and agg["mbs_max"] == mine[-1] and agg["repeats"] == 2
        fio = sorted(r["fio"]["mb_per_sec"] for r in matrix if r["config"] == agg["config"])
        assert agg["fio"] == fio[0]
    dims = {c["dimension"] for c in got["comparisons"]}
    assert {"filesystem", "io", "flush"} <= dims
    fs = next(c for c in got["comparisons"] if c["dimension"] == "filesystem")
    assert fs["pairs"] == len(configs) // 2
    assert 0 <= got["noise"] < 1

    text = out.read_text()
    assert "## The machine" in text and "Linux " in text
    assert "share that one virtual disk's bandwidth" in text
    assert text.count("| ext4 1dev 100B") == len(configs) // 2
    assert "## What won on this machine" in text and "Noise:" in text
    assert "Producer throughput vs batch size" in text
    assert "Kafka docs" in text
    for name in ("matrix-throughput", "matrix-p99", "matrix-fsync", "matrix-cpu",
                 "seeds-batch_size", "seeds-consumer_threads", "seeds-data_size",
                 "seeds-producer_threads", "seeds-topics"):
        png = plots / f"{name}.png"
        assert png.stat().st_size > 5000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(tuning/{name}.png)" in text
    seeds = [r for r in rows if r["suite"] == "seeds" and r["graph"] == "batch_size"]
    section = text[text.index("### Producer throughput vs batch size"):]
    section = section[:section.index("\n### ")]
    table = [line for line in section.splitlines() if line.startswith("| ") and
             line.split(" | ")[0][2:].isdigit()]
    assert len(table) == len(seeds)
