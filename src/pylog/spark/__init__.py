"""PySpark source and sink for pylog topics (``pip install pylog[spark]``).

``spark.read.format("pylog")``, ``spark.readStream.format("pylog")``,
``df.write.format("pylog")`` and ``writeStream.format("pylog")`` with Spark's
Kafka source and sink schema and option names, over PySpark's Python Data
Source API (no JVM jar): executors read the segment files directly.

The format is found without a ``register`` call (Spark imports top-level
``pyspark_*`` modules and registers their ``DefaultSource``; pylog ships
``pyspark_pylog``); :func:`register` does it explicitly. Modules:
``options`` (the option names and their checks), ``planning`` (offsets and
tasks on the driver), ``source`` (readers), ``sink`` (writers), ``commit``
(the driver's appends: a micro-batch exactly once), ``schema`` (the Kafka
source schema and the Arrow conversion).
"""

from __future__ import annotations

from .source import PylogDataSource

__all__ = ["PylogDataSource", "register"]


def register(spark) -> None:
    """Registers ``format("pylog")`` in ``spark`` (a SparkSession)."""
    spark.dataSource.register(PylogDataSource)
