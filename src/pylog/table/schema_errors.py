"""Errors of table schemas: a schema that cannot be a table's, and a schema
change the table cannot take."""

from __future__ import annotations

from pylog.errors import PylogError

__all__ = ["SchemaError", "SchemaEvolutionError"]


class SchemaError(PylogError, ValueError):
    """A value schema (JSON Schema, Avro, a registry subject) that cannot be
    turned into table columns, or a topic's schema configs that do not fit
    together. The message names the schema and the construct."""


class SchemaEvolutionError(SchemaError):
    """A new value schema the table cannot evolve to (a changed type, a
    removed or added required field). `field` is the dotted name of the first
    such field; the converter stops converting that topic."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field
