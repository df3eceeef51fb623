"""The ```python blocks of README.md and docs/*.md, for the tests that run them as pasted.

A block runs on its own, in a fresh directory, with nothing defined beforehand: a
snippet that needs a store, a broker or data makes them itself. One marker, an HTML
comment on the line before the block, changes where it runs:

    <!-- snippet: spark -->     runs in the suite's one SparkSession (tests/spark), which
                                the snippet's SparkSession.builder...getOrCreate() returns

Any other marker is an error, so a block cannot be quietly left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = {"spark"}

_BLOCK = re.compile(r"(?:<!-- snippet: (?P<marker>[^>]*?) -->[ \t]*\n)?^```python\n(?P<code>.*?)^```",
                    re.S | re.M)


@dataclass(frozen=True)
class Snippet:
    document: Path
    line: int               # the line of the opening fence
    marker: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def snippets() -> list[Snippet]:
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            marker = match.group("marker")
            if marker is not None and marker not in MARKERS:
                raise ValueError(f"{document.name}: unknown snippet marker {marker!r} "
                                 f"(known: {sorted(MARKERS)})")
            fence = match.start() if marker is None else text.index("```python", match.start())
            found.append(Snippet(document, text.count("\n", 0, fence) + 1, marker,
                                 match.group("code")))
    return found
