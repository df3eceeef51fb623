"""Kafka's unsigned varint (ByteUtils.writeUnsignedVarint), shared by the wire protocol's
codec and the transaction log's records without importing the protocol package (whose
generated messages ``import pylog`` does not load)."""

from __future__ import annotations

__all__ = ["uvarint_bytes"]


def uvarint_bytes(n: int) -> bytes:
    """`n` >= 0 as Kafka's unsigned varint (ByteUtils.writeUnsignedVarint)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
