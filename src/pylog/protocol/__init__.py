"""Kafka's wire protocol: the generated message codec (messages.py, from Kafka's JSON
definitions by tools/protocol_codegen.py), its primitives (codec.py), headers and
framing (api.py), and pylog's own small protocol client (client.py).

Knows bytes only: it imports nothing of storage, so the broker and the clients
(CLI, Spark's remote mode, benchmarks) share it.
"""

from .api import (
    API_NAMES,
    SUPPORTED,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    frame_response,
    is_flexible,
)
from .api_keys import ApiKey
from .codec import MalformedMessageError, Reader, Writer

__all__ = ["API_NAMES", "SUPPORTED", "ApiKey", "MalformedMessageError", "Reader", "RequestHeader", "Writer",
           "decode_request", "decode_response", "encode_request", "frame_response", "is_flexible"]
