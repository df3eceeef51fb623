"""The report job: PySpark reads the rig's results through pylog's own Spark source
(``format("pylog")``, topic ``tuning-results``), aggregates them, and writes
docs/TUNING.md with tables and PNG plots (matplotlib).

Per configuration (Spark): the median of the repeats and their spread (min-max), for
pylog's MB/s, fio's MB/s on the same filesystem in the same run, their ratio (paired
per repeat), the send -> ack latency p99, the mean flush (fsync) time and CPU seconds
per GB. Then (on the driver, a few dozen rows): for each dimension, the ratio between
configurations that differ only in it (the median of those ratios, and their range),
beside the run's noise, which is the median spread of repeats; and the Kafka docs'
five performance graphs.
"""

from __future__ import annotations

import datetime
import os
import statistics
from collections import defaultdict

__all__ = ["write_report", "aggregate"]

DIMS = ["filesystem", "devices", "record_size", "batch_bytes", "flush", "io", "engine",
        "fadvise", "partitions_per_device", "writeback"]


def _spark():
    from pyspark.sql import SparkSession
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import sys
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("pylog-tuning-report")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load(spark, stores: list[str], topic: str = "tuning-results"):
    """The results as a DataFrame of parsed JSON rows (pylog's Spark source). Each
    results dir is a store of its own (a comma list would be one store's log dirs)."""
    raw = None
    for store in stores:
        one = (spark.read.format("pylog").option("subscribe", topic).load(store)
               .selectExpr("CAST(value AS STRING) AS json"))
        raw = one if raw is None else raw.unionAll(one)
    return spark.read.json(raw.rdd.map(lambda r: r.json))


def aggregate(df):
    """Spark: one row per matrix configuration, the medians and spreads."""
    from pyspark.sql import functions as F
    m = df.where(F.col("suite") == "matrix")
    if not m.columns or "pylog" not in m.columns:
        return []
    m = m.select(*DIMS, "config", "repeat",
                 F.col("pylog.mb_per_sec").alias("mbs"),
                 F.col("pylog.records_per_sec").alias("rps"),
                 F.col("pylog.p99_ms").alias("p99"),
                 F.col("pylog.flush_ms_avg").alias("fsync_ms"),
                 (F.col("pylog.cpu_seconds") / (F.col("pylog.bytes") / 1e9)).alias("cpu_s_per_gb"),
                 F.col("fio.mb_per_sec").alias("fio"))
    m = m.withColumn("ratio", F.col("mbs") / F.col("fio"))
    med = lambda c: F.percentile_approx(c, 0.5, 10000)  # noqa: E731
    g = m.groupBy("config", *DIMS).agg(
        med("mbs").alias("mbs"), F.min("mbs").alias("mbs_min"), F.max("mbs").alias("mbs_max"),
        med("fio").alias("fio"), F.min("fio").alias("fio_min"), F.max("fio").alias("fio_max"),
        med("ratio").alias("ratio"), med("rps").alias("rps"), med("p99").alias("p99"),
        med("fsync_ms").alias("fsync_ms"), med("cpu_s_per_gb").alias("cpu_s_per_gb"),
        F.count("*").alias("repeats"))
    return [r.asDict() for r in g.orderBy(*DIMS).collect()]


_TRADE_OFFS = {
    "flush": " Flushing less often is a durability choice, not a free win: records not yet "
             "fsynced are lost in a power failure (Kafka's default is to leave it to the OS).",
    "record_size": " Record size is the application's; batching small records into larger "
                   "ones is what this says to do where it can.",
    "devices": " With loop devices on one disk this measures the software's parallelism only.",
}


def _fmt(v, digits=0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _short(r: dict) -> str:
    return (f"{r['filesystem']} {r['devices']}dev {r['record_size']}B {r['flush']} {r['io']}"
            + ("" if r["engine"] == "io_uring" else f" {r['engine']}")
            + (" fadvise" if r["fadvise"] else "")
            + ("" if r["writeback"] == "default" else f" wb={r['writeback']}"))


def comparisons(rows: list[dict]) -> list[dict]:
    """For each dimension with two or more values: the pylog MB/s ratio between
    configurations equal in every other dimension (value / the first value)."""
    out = []
    for dim in DIMS:
        values = sorted({r[dim] for r in rows}, key=lambda v: (str(type(v)), v))
        if len(values) < 2:
            continue
        base = values[0]
        by_rest = defaultdict(dict)
        for r in rows:
            rest = tuple(r[d] for d in DIMS if d != dim)
            by_rest[rest][r[dim]] = r
        for v in values[1:]:
            ratios = [g[v]["mbs"] / g[base]["mbs"] for g in by_rest.values()
                      if v in g and base in g and g[base]["mbs"]]
            lat = [g[v]["p99"] / g[base]["p99"] for g in by_rest.values()
                   if v in g and base in g and g[base]["p99"]]
            if ratios:
                out.append({"dimension": dim, "value": v, "baseline": base, "pairs": len(ratios),
                            "median": statistics.median(ratios), "low": min(ratios),
                            "high": max(ratios),
                            "p99_median": statistics.median(lat) if lat else None})
    return out


def noise(rows: list[dict]) -> float:
    """Median relative spread of the repeats, (max - min) / median, of pylog's MB/s."""
    spreads = [(r["mbs_max"] - r["mbs_min"]) / r["mbs"] for r in rows if r["mbs"]]
    return statistics.median(spreads) if spreads else 0.0


def _plot_matrix(rows: list[dict], plots: str) -> list[tuple[str, str]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    made = []
    labels = [_short(r) for r in rows]
    y = range(len(rows))
    for name, key, title, unit in (("throughput", None, "pylog vs fio on the same filesystem",
                                    "MB/s (payload for pylog, raw for fio)"),
                                   ("p99", "p99", "send -> acknowledgement latency, p99", "ms"),
                                   ("fsync", "fsync_ms", "mean flush (fsync) time", "ms"),
                                   ("cpu", "cpu_s_per_gb", "CPU seconds per GB written",
                                    "s/GB")):
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.5))
        if key is None:
            ax.barh([i + 0.2 for i in y], [r["mbs"] for r in rows], 0.4, label="pylog",
                    xerr=[[r["mbs"] - r["mbs_min"] for r in rows],
                          [r["mbs_max"] - r["mbs"] for r in rows]], color="#1f77b4")
            ax.barh([i - 0.2 for i in y], [r["fio"] for r in rows], 0.4, label="fio",
                    color="#bbbbbb")
            ax.legend(loc="lower right")
        else:
            ax.barh(list(y), [r[key] or 0 for r in rows], 0.6, color="#1f77b4")
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_title(title)
        fig.tight_layout()
        path = os.path.join(plots, f"matrix-{name}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, path))
    return made


def _plot_seeds(seeds: list[dict], plots: str) -> list[tuple[str, str, list]]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .seeds import SEED_CONSUME_MB, SEED_PRODUCE_MB
    titles = {"batch_size": "Producer throughput vs batch size",
              "consumer_threads": "Consumer throughput vs consumer threads",
              "data_size": "Producer throughput vs data size",
              "producer_threads": "Producer throughput vs producer threads",
              "topics": "Producer throughput vs number of topics"}
    made = []
    for graph, title in titles.items():
        pts = [s for s in seeds if s["graph"] == graph]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.6))
        series = defaultdict(list)
        for s in pts:
            series[s.get("api") or "pylog"].append((s["x"], s["mb_per_sec"]))
        for name, xs in series.items():
            xs.sort()
            ax.plot([x for x, _ in xs], [v for _, v in xs], marker="o", label=f"pylog ({name})")
        ref = SEED_CONSUME_MB if graph == "consumer_threads" else SEED_PRODUCE_MB
        ax.axhline(ref, color="gray", linestyle="--", label=f"Kafka docs: ~{ref} MB/s")
        if graph in ("batch_size", "data_size", "topics"):
            ax.set_xscale("log")
        ax.set_xlabel(pts[0]["xlabel"])
        ax.set_ylabel("MB/s")
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(plots, f"seeds-{graph}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append((title, path, sorted(pts, key=lambda s: (s.get("api") or "", s["x"]))))
    return made


def write_report(stores: list[str], output: str, plots: str, topic: str = "tuning-results",
                 spark=None) -> dict:
    """Runs the job; returns what it computed (rows, comparisons, noise)."""
    own = spark is None
    spark = spark or _spark()
    try:
        df = load(spark, stores, topic)
        rows = aggregate(df)
        seeds = []
        if "suite" in df.columns and "graph" in df.columns:
            seeds = [r.asDict(recursive=True) for r in df.where("suite = 'seeds'")
                     .select("graph", "x", "xlabel", "mb_per_sec", "records_per_sec",
                             *(["api"] if "api" in df.columns else [])).collect()]
        meta = df.where("suite = 'matrix'").limit(1).collect() if "machine" in df.columns else []
        runs = ([r.run_id for r in df.where("suite = 'matrix'").select("run_id").distinct()
                 .collect()] if "run_id" in df.columns else [])
    finally:
        if own:
            spark.stop()
    os.makedirs(plots, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    rel = os.path.relpath(plots, os.path.dirname(os.path.abspath(output)))
    comps = comparisons(rows)
    spread = noise(rows)
    lines = ["# Tuning pylog for a machine: ext4, XFS, O_DIRECT, flush policies, JBOD", "",
             f"*Generated {datetime.date.today().isoformat()} by `tuning/report.py` (a PySpark "
             "job reading the rig's results through pylog's own Spark source) from the runs "
             f"{', '.join(sorted(runs)) or '(none)'}. Re-run: `sudo tuning/run` (the default "
             "matrix, the graphs and this report took 5 minutes on the machine below), or "
             "`python -m tuning run --config tuning/full.toml` for every option.*",
             ""]
    if meta:
        m = meta[0].asDict(recursive=True)
        mach = m["machine"]
        mounts = m.get("mounts") or []
        backing = (mounts[0].get("loop_backing") or {}) if mounts else {}
        lines += ["## The machine", "",
                  f"- {mach['cpu']}, {mach['cpus']} CPUs, {mach['memory_gib']} GiB RAM, "
                  f"Linux {mach['kernel']}, Python {mach['python']}",
                  f"- write-back defaults: " + ", ".join(f"{k}={v}" for k, v in
                                                        sorted(mach["writeback_defaults"].items())),
                  f"- per measurement: {m['volume_mib']} MiB of payload; memory state "
                  f"`{m['memory']}` (the previous run's files deleted just before each run)"]
        if backing:
            lines.append(f"- **the filesystems are loop devices whose images live on "
                         f"{backing.get('on')} ({backing.get('fs_type')}): they share that one "
                         "virtual disk's bandwidth, so two devices split it instead of doubling "
                         "it; on real JBOD hardware give `--mounts`**")
        lines.append("")
    if rows:
        lines += ["## Results per configuration", "",
                  "Median of the repeats (min-max in brackets). pylog: `pylog perf produce`, "
                  "send_batch of ~1 MiB a call, acks=1, the flush policy as `flush.messages`; "
                  "MB/s of record payload (pylog also writes the record and batch framing). "
                  "fio: the same bytes as plain sequential writes of the batch size, on the same "
                  "filesystem, in the same run. p99: send -> acknowledgement of sampled "
                  "records. fsync: mean time of the log flushes.", "",
                  "| configuration | pylog MB/s | fio MB/s | pylog / fio | p99 ms | fsync ms | "
                  "CPU s/GB | repeats |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {_short(r)} | {_fmt(r['mbs'])} ({_fmt(r['mbs_min'])}-"
                         f"{_fmt(r['mbs_max'])}) | {_fmt(r['fio'])} ({_fmt(r['fio_min'])}-"
                         f"{_fmt(r['fio_max'])}) | {_fmt(r['ratio'], 2)} | {_fmt(r['p99'], 1)} | "
                         f"{_fmt(r['fsync_ms'], 1)} | {_fmt(r['cpu_s_per_gb'], 1)} | "
                         f"{r['repeats']} |")
        lines.append("")
        for title, path in _plot_matrix(rows, plots):
            lines += [f"![{title}]({rel}/{os.path.basename(path)})", ""]
        lines += ["## What won on this machine", "",
                  f"Noise: the repeats of one configuration spread by {spread:.0%} "
                  "(median of (max - min) / median): differences smaller than that are not "
                  "results.", "",
                  "| dimension | value vs baseline | configurations compared | MB/s ratio, "
                  "median (range) | throughput | p99 latency ratio | latency |",
                  "|---|---|---|---|---|---|---|"]
        for c in comps:
            delta = c["median"] - 1
            verdict = ("within the noise" if abs(delta) <= spread else
                       f"{c['value']} faster by {delta:.0%}" if delta > 0 else
                       f"{c['baseline']} faster by {1 / c['median'] - 1:.0%}")
            lat = c["p99_median"]
            lat_verdict = ("-" if lat is None else "within the noise" if abs(lat - 1) <= spread
                           else f"{c['value']} {1 - lat:.0%} lower" if lat < 1 else
                           f"{c['value']} {lat - 1:.0%} higher")
            lines.append(f"| {c['dimension']} | {c['value']} vs {c['baseline']} | {c['pairs']} | "
                         f"{c['median']:.2f} ({c['low']:.2f}-{c['high']:.2f}) | {verdict} | "
                         f"{_fmt(lat, 2)} | {lat_verdict} |")
        lines += ["", "Recommendations for this machine (differences beyond the noise only):", ""]
        said = False
        for c in comps:
            delta = c["median"] - 1
            lat = c["p99_median"]
            if abs(delta) > spread:
                win, lose = (c["value"], c["baseline"]) if delta > 0 else (c["baseline"], c["value"])
                gain = delta if delta > 0 else 1 / c["median"] - 1
                note = _TRADE_OFFS.get(c["dimension"], "")
                lines.append(f"- **{c['dimension']}**: {win} rather than {lose}: {gain:.0%} more "
                             f"throughput (median of {c['pairs']} paired configurations, range "
                             f"{c['low']:.2f}-{c['high']:.2f}x).{note}")
                said = True
            elif lat is not None and abs(lat - 1) > spread:
                win, lose = (c["value"], c["baseline"]) if lat < 1 else (c["baseline"], c["value"])
                cut = 1 - lat if lat < 1 else 1 - 1 / lat
                lines.append(f"- **{c['dimension']}**: {win} rather than {lose} for latency: the "
                             f"p99 is {cut:.0%} lower at the same throughput (within the noise)."
                             + _TRADE_OFFS.get(c["dimension"], ""))
                said = True
        if not said:
            lines.append("- no setting measured here differs by more than the noise.")
        best = max(rows, key=lambda r: r["mbs"])
        lines += ["", f"Fastest configuration measured: **{_short(best)}**, "
                  f"{_fmt(best['mbs'])} MB/s ({best['ratio']:.2f}x of fio on the same "
                  "filesystem).", ""]
    if seeds:
        lines += ["## The Kafka docs' five performance graphs, on this machine", "",
                  "The docs' settings: 200-byte messages, batches of 200, fetch size 1 MB, a "
                  "flush every 600 messages; they report about 50 MB/s produced and 100 MB/s "
                  "consumed on one broker (2011-era disks, over a network). Here: one process, "
                  "in-process store on the VM's disk, `pylog perf`.", ""]
        for title, path, pts in _plot_seeds(seeds, plots):
            lines += [f"### {title}", "", f"![{title}]({rel}/{os.path.basename(path)})", "",
                      "| " + pts[0]["xlabel"] + " | MB/s | records/s |", "|---|---|---|"]
            for p in pts:
                api = f" ({p['api']})" if p.get("api") else ""
                lines.append(f"| {p['x']}{api} | {_fmt(p['mb_per_sec'], 1)} | "
                             f"{_fmt(p['records_per_sec'])} |")
            lines.append("")
    with open(output, "w") as f:
        f.write("\n".join(lines))
    return {"rows": rows, "comparisons": comps, "noise": spread, "seeds": seeds}
