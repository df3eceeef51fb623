"""Tables and plots of bench_clients.py: the producer, consumer, latency and
targets tables (Markdown for bench/RESULTS.md or plain text) and the PNGs."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import render as _render, verdict  # noqa: E402

if TYPE_CHECKING:
    from bench_clients import ConsumerRow, LatencyRow, ProducerRow

KiB = 1024
MB = 1e6

# Issue 5 targets.
TARGET_SEND = 1e6            # send(), one thread, 100 B values, records/s
TARGET_SEND_BATCH_RAW = 0.80  # send_batch >= 80% of raw append
TARGET_POLL_ARROW = 10e6     # records/s
KAFKA_2014_LATENCY = (2.0, 3.0, 14.0)  # ms, p50/p99/p99.9, 3 brokers (Kreps, 2014)


def render(title, header, rows, markdown, notes=()):
    return _render(title, header, rows, markdown, notes, heading="####", text_columns=2)


# =========================================================================== output

def fmt_rate(x):
    return f"{x / 1e6:,.2f} M"


def fmt_ratio(x):
    return f"{x:.2f}×"


def cpu_mark(pct):
    return f"{pct:.0f}%" + (" ⚠" if pct >= 10 else "")


def producer_table(rows: list[ProducerRow], markdown: bool) -> str:
    header = ["sweep", "value", "records", "send() rec/s", "send() MB/s", "send_batch rec/s", "send_batch MB/s",
              "raw append rec/s", "naive rec/s", "encode_batch alone rec/s", "send_batch ÷ raw", "send_batch ÷ naive",
              "send() ÷ raw", "memory", "other procs' CPU"]
    body = []
    for r in rows:
        body.append([f"{r.sweep} = {r.x}", f"{r.w.size} B", f"{r.w.total_records:,}",
                     fmt_rate(r.rate(r.send)), f"{r.mbs(r.send):,.0f}",
                     fmt_rate(r.rate(r.send_batch)), f"{r.mbs(r.send_batch):,.0f}",
                     fmt_rate(r.rate(r.raw)), fmt_rate(r.rate(r.naive)), fmt_rate(r.rate(r.encode)),
                     fmt_ratio(r.raw / r.send_batch), fmt_ratio(r.naive / r.send_batch),
                     fmt_ratio(r.raw / r.send), r.memory, cpu_mark(r.others_cpu)])
    notes = [
        "rec/s over all threads; MB/s counts value bytes (records × value size). Best of N trials.",
        "batch: the producer's batch.size for send(), and the records per send_batch() call, "
        "raw-append batch and naive write (records ≈ (batch − 61) ÷ (value + 21), as the "
        "producer's accumulator fills a batch).",
        "raw append: the same records pre-encoded (not timed) into those batches, one "
        "Log.append per batch. naive: struct.pack('>iq', len, offset) + value into a "
        "bytearray, one write() per batch to a plain file (the limits page's peer 2).",
        "encode_batch alone: the encoding that send_batch does on the calling thread and "
        "raw append does not (raw append's batches are encoded before the timing).",
        "The ratios divide rates (÷ raw = pylog rate ÷ raw-append rate, ÷ naive likewise).",
        "Producers: acks=1, linger.ms=5, no compression, null keys. threads > 1: one Producer "
        "per thread, one topic with one partition per thread, send(..., partition=i); "
        "topics > 1: records (send) or calls (send_batch) round-robin over single-partition topics.",
        "memory: page-cache state of the written pages (see Method). other procs' CPU: % of "
        "all CPUs used by other processes in this VM during the row; ⚠ marks ≥ 10%.",
    ]
    return render("Producer throughput", header, body, markdown, notes)


def consumer_table(rows: list[ConsumerRow], markdown: bool, memcpy_gbs: float, info: dict,
                   max_poll_records: int) -> str:
    header = ["threads", "poll() rec/s", "poll() MB/s", "poll_arrow rec/s", "poll_arrow MB/s",
              "raw read + decode_arrow rec/s", "poll_arrow ÷ raw", "poll_arrow MB/s ÷ memcpy",
              "other procs' CPU"]
    body = []
    for r in rows:
        pa_rate = r.rate(r.poll_arrow)
        body.append([r.threads, fmt_rate(r.rate(r.poll)), f"{r.rate(r.poll) * r.size / MB:,.0f}",
                     fmt_rate(pa_rate), f"{pa_rate * r.size / MB:,.0f}",
                     fmt_rate(r.rate(r.raw)), f"{r.raw / r.poll_arrow:.2f}×",
                     f"{pa_rate * r.size / 1e9 / memcpy_gbs * 100:.1f}%", cpu_mark(r.others_cpu)])
    r0 = rows[0]
    notes = [
        f"{r0.records:,} records of {r0.size} B in 4 partitions, written as 1000-record batches "
        f"({info.get('batch_bytes', 0):,} B) seconds before (page cache), read from offset 0 to the end.",
        f"One Consumer per thread, all in one group (range assignor), max.poll.records = "
        f"{max_poll_records:,}, other settings default (max.partition.fetch.bytes 1 MiB, "
        f"check.crcs true); poll(0) until it returns nothing. rec/s over all threads.",
        "raw read: per thread, its partitions read with Log.read(position, 1 MiB), "
        "FileSlice.read() and decode_arrow (CRC checked): the storage and codec without the "
        "Consumer.",
        f"memcpy: numpy.copyto 512 MiB between touched arrays, {memcpy_gbs:.1f} GB/s in this run.",
    ]
    return render("Consumer throughput", header, body, markdown, notes)


def latency_table(rows: list[LatencyRow], markdown: bool) -> str:
    header = ["rate (rec/s)", "linger.ms", "acks", "achieved rec/s", "e2e p50 ms", "e2e p99 ms",
              "e2e p99.9 ms", "e2e max ms", "ack p50 ms", "ack p99 ms", "ack p99.9 ms",
              "Kafka 2014 p50/p99/p99.9 ms", "other procs' CPU"]
    body = []
    k = "/".join(f"{x:g}" for x in KAFKA_2014_LATENCY)
    for r in rows:
        body.append([f"{r.rate:,}", r.linger_ms, r.acks, f"{r.achieved:,.0f}",
                     *(f"{x:.2f}" for x in r.e2e), *(f"{x:.2f}" for x in r.ack[:3]), k,
                     cpu_mark(r.others_cpu)])
    r0 = rows[0]
    notes = [
        f"One Producer (batch.size 16 KiB, 100 B values, one partition) sending at the fixed rate "
        f"for {r0.duration:g} s in bursts of whatever is due (sleeping in between), and one "
        f"Consumer thread calling poll(0.2), in the same process. The first 0.5 s are not counted "
        f"(e2e samples per row: rate × {r0.duration - 0.5:g} s, "
        + ", ".join(sorted({f"{r.samples:,} at {r.rate:,}/s" for r in rows})) + ").",
        "e2e = time poll() returned the record − time send() was called (monotonic clock; the "
        "send time is in the value). ack = time the record's future completed − send time "
        "(every 16th record): acks=all includes the fsync.",
        "A consumer sees a record once it is appended (page cache), not after the fsync: "
        "acks=all shows in e2e only through a busier sender.",
        "Kafka 2014: Jay Kreps, 'Benchmarking Apache Kafka: 2 Million Writes Per Second (On "
        "Three Cheap Machines)', 3 brokers, replication 3, acks=1 producer; over a network.",
    ]
    return render("End-to-end latency", header, body, markdown, notes)


def targets_table(prod_rows, cons_rows, markdown):
    header = ["target (issue 5)", "measured", "result"]
    body = []
    base = [r for r in prod_rows if r.sweep == "record size" and r.w.size == 100
            and r.memory == "recently freed"]
    if not base:
        base = [r for r in prod_rows if r.w.size == 100 and r.w.threads == 1 and r.w.topics == 1
                and r.memory == "recently freed"]
    if base:
        r = base[0]
        sb, raw, naive, send = (r.rate(r.send_batch), r.rate(r.raw), r.rate(r.naive),
                                r.rate(r.send))
        body.append([f"send_batch ≥ 80% of raw append (100 B, batch {r.w.batch_bytes // KiB} KiB)",
                     f"{fmt_rate(sb)}/s = {sb / raw * 100:.0f}% of {fmt_rate(raw)}/s",
                     verdict(sb >= TARGET_SEND_BATCH_RAW * raw)])
        body.append(["send_batch ≥ naive bytearray + write (100 B)",
                     f"{fmt_rate(sb)}/s vs {fmt_rate(naive)}/s ({sb / naive:.2f}×)",
                     verdict(sb >= naive)])
        body.append(["send() ≥ 1 M records/s, one thread, 100 B",
                     f"{fmt_rate(send)}/s", verdict(send >= TARGET_SEND)])
        allrows = [r for r in prod_rows if r.memory == "recently freed"]
        ok80 = sum(1 for r in allrows if r.send_batch <= r.raw / TARGET_SEND_BATCH_RAW)
        okn = sum(1 for r in allrows if r.send_batch <= r.naive)
        body.append(["(all producer rows) send_batch ≥ 80% raw / ≥ naive",
                     f"{ok80} / {okn} of {len(allrows)} rows", "—"])
    if cons_rows:
        r = cons_rows[0]
        pa_rate = r.rate(r.poll_arrow)
        best = max(cons_rows, key=lambda c: c.rate(c.poll_arrow))
        body.append(["poll_arrow ≥ 10 M records/s (100 B)",
                     f"1 thread {fmt_rate(pa_rate)}/s; best {fmt_rate(best.rate(best.poll_arrow))}/s "
                     f"({best.threads} threads)",
                     verdict(pa_rate >= TARGET_POLL_ARROW)])
    return render("Targets (issue 5)", header, body, markdown)


# =========================================================================== plots

def write_plots(outdir, prod_rows, cons_rows, lat_rows, say):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    written = []

    def write(fig, name):
        fig.tight_layout()
        path = os.path.join(outdir, name)
        fig.savefig(path)
        plt.close(fig)
        return path

    def _save(fig, ax, path):
        """Zero-based y axis, grid, legend, then written (the line plots)."""
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return write(fig, os.path.basename(path))

    sweeps = [("batch size", "batch size", True), ("record size", "value size", True),
              ("threads", "producer threads", False), ("topics", "topics", True)]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.2), dpi=80)
    for ax, (sweep, xlabel, logx) in zip(axes.flat, sweeps):
        rows = [r for r in prod_rows if r.sweep == sweep and r.memory == "recently freed"]
        if not rows:
            ax.set_visible(False)
            continue
        xs = [_xval(r) for r in rows]
        for attr, label, style in (("send_batch", "send_batch()", "o-"), ("raw", "raw Log.append", "s--"),
                                   ("naive", "naive bytearray+write", "^:"), ("send", "send()", "d-")):
            ax.plot(xs, [r.rate(getattr(r, attr)) / 1e6 for r in rows], style, label=label)
        if logx:
            ax.set_xscale("log", base=2 if sweep != "topics" else 10)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.x for r in rows], fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("M records/s")
        fixed = "100 B values" if sweep != "record size" else f"batch {rows[0].w.batch_bytes // KiB} KiB"
        ax.set_title(f"producer vs {sweep} ({fixed})", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    written.append(write(fig, "producer_throughput.png"))

    # MB/s vs record size (the records/s plot hides the bytes).
    rows = [r for r in prod_rows if r.sweep == "record size" and r.memory == "recently freed"]
    if rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=80)
        xs = [_xval(r) for r in rows]
        for attr, label, style in (("send_batch", "send_batch()", "o-"), ("raw", "raw Log.append", "s--"),
                                   ("naive", "naive bytearray+write", "^:"), ("send", "send()", "d-")):
            ax.plot(xs, [r.mbs(getattr(r, attr)) for r in rows], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([r.x for r in rows], fontsize=8)
        ax.set_xlabel("value size")
        ax.set_ylabel("MB/s of values")
        ax.set_title("producer MB/s vs record size", fontsize=10)
        written.append(_save(fig, ax, os.path.join(outdir, "producer_mbps_vs_record_size.png")))

    if cons_rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=80)
        xs = [r.threads for r in cons_rows]
        for attr, label, style in (("poll_arrow", "poll_arrow()", "o-"), ("raw", "Log.read + decode_arrow", "s--"),
                                   ("poll", "poll()", "d-")):
            ax.plot(xs, [r.rate(getattr(r, attr)) / 1e6 for r in cons_rows], style, label=label)
        ax.axhline(TARGET_POLL_ARROW / 1e6, color="grey", lw=0.8, ls="-.", label="target poll_arrow")
        ax.set_xticks(xs)
        ax.set_xlabel("consumer threads (one Consumer each, one group)")
        ax.set_ylabel("M records/s (100 B)")
        ax.set_title("consumer throughput vs threads", fontsize=10)
        written.append(_save(fig, ax, os.path.join(outdir, "consumer_throughput.png")))

    if lat_rows:
        fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=80)
        labels = [f"{r.rate // 1000}k/s\nl{r.linger_ms} a{r.acks}" for r in lat_rows]
        idx = np.arange(len(lat_rows) + 1)
        wd = 0.27
        kafka = KAFKA_2014_LATENCY
        for j, (name, color) in enumerate((("p50", "C0"), ("p99", "C1"), ("p99.9", "C3"))):
            vals = [r.e2e[j] for r in lat_rows] + [kafka[j]]
            ax.bar(idx + (j - 1) * wd, vals, wd, label=name, color=color)
        ax.set_xticks(idx)
        ax.set_xticklabels(labels + ["Kafka 2014\n3 brokers"], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("end-to-end latency, ms (log)")
        ax.set_title("end-to-end latency (l = linger.ms, a = acks)", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
        written.append(write(fig, "latency.png"))
    for p in written:
        say(f"wrote {p} ({os.path.getsize(p) // 1024} KiB)")
    return written


def _xval(r: ProducerRow):
    if r.sweep == "batch size":
        return r.w.batch_bytes
    if r.sweep == "record size":
        return r.w.size
    if r.sweep == "threads":
        return r.w.threads
    return r.w.topics
