"""The group coordinator: consumer groups and committed offsets.

One coordinator per store (:class:`GroupCoordinator`), built over the
storage layer's public names; in-process consumers use it, and the broker
will serve it to remote clients.
"""

from .group import ConsumerGroup
from .group_coordinator import GroupCoordinator
from .offsets import OffsetAndMetadata

__all__ = ["ConsumerGroup", "GroupCoordinator", "OffsetAndMetadata"]
