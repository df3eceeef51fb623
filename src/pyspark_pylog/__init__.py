"""Lets Spark find ``format("pylog")`` with no register call.

PySpark (4.x) imports every top-level module whose name starts with
``pyspark_`` when a session first looks up a Python data source, and
registers its ``DefaultSource`` under ``DefaultSource.name()``.
"""

from pylog.spark import PylogDataSource as DefaultSource

__all__ = ["DefaultSource"]
