"""A broker's partitions and consumer groups over Kafka's wire protocol, for pylog's own
tools: the Spark source and sink in remote mode (``kafka.bootstrap.servers``) and the
CLI's ``--bootstrap-server`` forms, against ``pylog serve`` or a Kafka cluster.

- partitions.py: RemoteTopics/RemotePartition answer what LogDirsReader answers for log
  dirs (topics, offsets, Arrow batches of a range); RemoteProducer sends encoded batches.
- groups.py: RemoteGroups, what kafka-consumer-groups.sh asks of its AdminClient.
- security.py: ClientSecurity, Kafka's client keys for TLS and SASL (tls.py, sasl.py),
  what every connection of the above authenticates with.
"""

from .groups import GroupDescription, GroupMember, RemoteGroups
from .partitions import RemotePartition, RemoteProducer, RemoteTopics, leaders
from .security import ClientSecurity

__all__ = ["ClientSecurity", "GroupDescription", "GroupMember", "RemoteGroups", "RemotePartition",
           "RemoteProducer", "RemoteTopics", "leaders"]
