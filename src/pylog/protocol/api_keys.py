"""``ApiKey``: Kafka's API keys by Kafka's names (ApiKeys.java: ``ApiKey.PRODUCE == 0``,
``ApiKey.OFFSET_FOR_LEADER_EPOCH == 23``), one per API the generated codec has. Built
from messages.REQUESTS, so an API added to tools/protocol_codegen.py gets its key here
with no second list."""

from __future__ import annotations

import re
from enum import IntEnum

from . import messages as m

__all__ = ["ApiKey", "kafka_name"]


def kafka_name(message: str) -> str:
    """Kafka's enum name of an API from its message name: "OffsetForLeaderEpochRequest"
    -> "OFFSET_FOR_LEADER_EPOCH" (Kafka's MessageGenerator.toSnakeCase, upper-cased)."""
    base = message.removesuffix("Request")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).upper()


ApiKey = IntEnum("ApiKey", sorted(((kafka_name(cls.__name__), key) for key, cls in m.REQUESTS.items()),
                                  key=lambda item: item[1]),
                 module=__name__, qualname="ApiKey")
ApiKey.__doc__ = "Kafka's API keys by Kafka's names (ApiKeys.java)."
