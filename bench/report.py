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
