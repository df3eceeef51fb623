"""Table rendering shared by the benchmarks: Markdown for bench/RESULTS.md, or
aligned plain text for a terminal."""

from __future__ import annotations


def verdict(ok: bool) -> str:
    return "PASS" if ok else "**MISS**"


def render(title: str, header: list[str], rows: list[list], markdown: bool, notes=(), *,
           heading: str = "###", text_columns: int = 2) -> str:
    """One table. In plain text the first `text_columns` columns are left-aligned
    and the numbers after them right-aligned; `notes` become bullet lines."""
    out = []
    if markdown:
        out.append(f"{heading} {title}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" for _ in header) + "|")
        for r in rows:
            out.append("| " + " | ".join(str(c) for c in r) + " |")
        if notes:
            out.append("")
            out.extend(f"- {line}" for line in notes)
    else:
        out.append(title)
        out.append("=" * len(title))
        widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
        out.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        out.append("  ".join("-" * w for w in widths))
        for r in rows:
            out.append("  ".join(str(c).rjust(w) if i >= text_columns else str(c).ljust(w)
                                 for i, (c, w) in enumerate(zip(r, widths))))
        out.extend(f"  * {line}" for line in notes)
    out.append("")
    return "\n".join(out)


# ------------------------------------------------------------- machine noise
# This VM is shared: every benchmark reports how much CPU other processes used
# while it measured, and can wait for a quiet moment first.

def cpu_snapshot():
    """(busy, steal, total) jiffies over all CPUs, and this process's CPU seconds."""
    import os
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    t = os.times()
    return user + nice + system + irq + softirq, steal, sum(v), t.user + t.system


def cpu_report(before, after):
    """(% of all CPUs used by other processes in this VM, % stolen by the host)."""
    import os
    hz = os.sysconf("SC_CLK_TCK")
    busy, steal, total = (after[i] - before[i] for i in range(3))
    mine = (after[3] - before[3]) * hz
    if total <= 0:
        return 0.0, 0.0
    return max(0.0, 100 * (busy - mine) / total), 100 * steal / total


def wait_for_quiet(max_wait, say, threshold=10.0):
    """Waits (up to max_wait s) for a 1 s window in which other processes use < threshold %;
    returns (their %, seconds waited)."""
    import time
    t0 = time.perf_counter()
    while True:
        before = cpu_snapshot()
        time.sleep(1.0)
        others, _ = cpu_report(before, cpu_snapshot())
        if others < threshold:
            return others, time.perf_counter() - t0
        if time.perf_counter() - t0 >= max_wait:
            say(f"machine still busy ({others:.0f}% CPU used by other processes); going ahead")
            return others, time.perf_counter() - t0
        say(f"waiting for a quiet machine ({others:.0f}% CPU used by other processes) ...")
