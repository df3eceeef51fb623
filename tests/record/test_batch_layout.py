"""pylog.record.batch_layout is _core/batch_format.h: the header's enums are parsed and
evaluated here, and every Python name must equal its ``PYLOG_`` twin; the codec's own
exported constants and a real encoded batch agree with both."""

from __future__ import annotations

import re
from pathlib import Path

from pylog._core import codec
from pylog._core.crc import crc32c
from pylog.record import batch_layout as layout
from pylog.record import encode_batch

HEADER_FILE = Path(__file__).resolve().parents[2] / "src" / "pylog" / "_core" / "batch_format.h"


def header_constants() -> dict[str, int]:
    """NAME -> value for every enumerator of batch_format.h (expressions of earlier names,
    integers and '+', as the file writes them) and every integer #define."""
    text = re.sub(r"/\*.*?\*/", "", HEADER_FILE.read_text(), flags=re.S)
    values: dict[str, int] = {}
    for name, literal in re.findall(r"#define\s+(PYLOG_\w+)\s+\(?(-?\d+)LL\)?", text):
        values[name] = int(literal)
    for body in re.findall(r"enum\s*\{(.*?)\}", text, flags=re.S):
        for item in body.split(","):
            if "=" not in item:
                continue
            name, expr = (s.strip() for s in item.split("=", 1))
            total = 0
            for term in expr.split("+"):
                term = term.strip()
                total += values[term] if term in values else int(term, 0)
            values[name] = total
    return values


def test_every_python_name_is_the_headers():
    c = header_constants()
    names = [n for n in layout.__all__ if n not in ("HEADER", "ATTRIBUTES_LOW_BYTE")]
    assert len(names) == 22
    for name in names:
        assert getattr(layout, name) == c["PYLOG_" + name], name
    # every offset and attribute bit the header defines has its Python twin
    for name in c:
        if name.endswith("_OFFSET") or name.startswith("PYLOG_ATTR_"):
            assert name[len("PYLOG_"):] in layout.__all__, name
    assert layout.ATTRIBUTES_LOW_BYTE == c["PYLOG_ATTRIBUTES_OFFSET"] + 1


def test_header_struct_fields_sit_at_the_offsets():
    order = ["BASE_OFFSET", "LENGTH", "PARTITION_LEADER_EPOCH", "MAGIC", "CRC", "ATTRIBUTES",
             "LAST_OFFSET_DELTA", "BASE_TIMESTAMP", "MAX_TIMESTAMP", "PRODUCER_ID",
             "PRODUCER_EPOCH", "BASE_SEQUENCE", "RECORDS_COUNT", "RECORDS"]
    fmt = layout.HEADER.format
    for i, name in enumerate(order):
        assert struct_prefix_size(fmt, i) == getattr(layout, name + "_OFFSET"), name
    assert layout.HEADER.size == layout.RECORD_BATCH_OVERHEAD == codec.RECORD_BATCH_OVERHEAD
    assert layout.LOG_OVERHEAD == codec.LOG_OVERHEAD


def struct_prefix_size(fmt: str, fields: int) -> int:
    import struct
    return struct.calcsize(fmt[:1 + fields])


def test_a_real_batch_reads_back_through_the_layout():
    data = encode_batch([b"v", b"v2"], [b"k", b"k2"], [5, 9], base_offset=40,
                        compression="gzip", producer_id=7, producer_epoch=3, base_sequence=11)
    h = layout.HEADER.unpack_from(data)
    assert h[0] == 40 and h[1] == len(data) - layout.LOG_OVERHEAD
    assert data[layout.MAGIC_OFFSET] == 2
    assert data[layout.ATTRIBUTES_LOW_BYTE] & layout.ATTR_COMPRESSION_MASK == 1    # gzip
    assert h[4] == crc32c(data[layout.ATTRIBUTES_OFFSET:])
    assert (h[6], h[9], h[10], h[11], h[12]) == (1, 7, 3, 11, 2)
