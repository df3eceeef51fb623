"""The broker: pylog's store served over Kafka's wire protocol to real Kafka clients.

:class:`Broker` (server.py) accepts connections (connection.py: framing, in-order
responses, sendfile of fetched records) and dispatches each request to its API's
handler: data_plane.py (Produce, Fetch, ListOffsets, InitProducerId, DeleteRecords),
admin.py (ApiVersions, Metadata, topics, partitions, configs) and groups.py (the group
APIs over the store's coordinator). Broker configs: config.py.
"""

from .config import SERVER_CONFIGS, ServerConfig, read_properties, split_config
from .server import Broker

__all__ = ["Broker", "SERVER_CONFIGS", "ServerConfig", "read_properties", "split_config"]
