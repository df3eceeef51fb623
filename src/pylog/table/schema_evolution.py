"""A typed table's schema following its value schema.

Allowed (the table evolves with pyiceberg's ``update_schema().union_by_name``,
old rows read null in a new column):

- a new optional field (at any level of nested objects/records);
- a new required field while the table has no rows yet (the first schema);
- a field dropped from the schema that was optional: the column stays, new
  rows hold null;
- a required field made optional;
- Iceberg's type promotions: int -> long, float -> double, decimal(P, S) ->
  decimal(P', S) with P' > P.

Refused, with SchemaEvolutionError naming the field (the converter then stops
converting that topic, and only that one, until the schema is fixed):

- a changed type (string -> long, a struct made a list, a narrower decimal);
- a required field dropped from the schema (a reader of the table counts on it);
- a new required field on a table that has rows (they have no value for it).
"""

from __future__ import annotations

from collections.abc import Collection

from pylog.table.schema_errors import SchemaEvolutionError

__all__ = ["check_evolution", "evolve_table"]


def _promotable(old, new) -> bool:
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType
    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    return (isinstance(old, DecimalType) and isinstance(new, DecimalType)
            and old.scale == new.scale and new.precision >= old.precision)


def _describe(t) -> str:
    return str(t)


def _compare_type(old, new, path: str, has_rows: bool) -> bool:
    """Raises for an incompatible change of the type at `path`; True when the
    table must change (a new field, a promotion, a relaxed field)."""
    from pyiceberg.types import ListType, MapType, StructType
    if isinstance(old, StructType) and isinstance(new, StructType):
        return _compare_fields(old.fields, new.fields, path + ".", has_rows, ())
    if isinstance(old, ListType) and isinstance(new, ListType):
        return _compare_type(old.element_type, new.element_type, path + "[]", has_rows)
    if isinstance(old, MapType) and isinstance(new, MapType):
        k = _compare_type(old.key_type, new.key_type, path + "{key}", has_rows)
        return _compare_type(old.value_type, new.value_type, path + "{}", has_rows) or k
    if old.is_primitive and new.is_primitive and _promotable(old, new):
        return old != new
    raise SchemaEvolutionError(
        f"field {path}: its type changes from {_describe(old)} to {_describe(new)}, which "
        f"the table cannot take (only int->long, float->double and a wider decimal "
        f"evolve); the topic's conversion stops until the schema is fixed", path)


def _compare_fields(old_fields, new_fields, prefix: str, has_rows: bool,
                    ignore: Collection[str]) -> bool:
    changed = False
    new_by_name = {f.name: f for f in new_fields}
    old_by_name = {f.name: f for f in old_fields}
    for f in old_fields:
        if f.name in ignore:
            continue
        if f.name not in new_by_name and f.required:
            raise SchemaEvolutionError(
                f"field {prefix}{f.name}: required in the table and absent from the new "
                f"schema; the topic's conversion stops until the schema is fixed",
                prefix + f.name)
    for f in new_fields:
        old = old_by_name.get(f.name)
        if old is None:
            if f.required and has_rows:
                raise SchemaEvolutionError(
                    f"field {prefix}{f.name}: a new required field, but the table has rows "
                    f"without it (add it as optional); the topic's conversion stops until "
                    f"the schema is fixed", prefix + f.name)
            changed = True
            continue
        if old.required and not f.required:
            changed = True
        changed |= _compare_type(old.field_type, f.field_type, prefix + f.name, has_rows)
    return changed


def check_evolution(current, new, ignore: Collection[str] = (), has_rows: bool = True) -> bool:
    """Raises SchemaEvolutionError when the table schema `current` cannot evolve
    to hold the fields of `new` (top-level names in `ignore` are not the
    value's: Kafka's columns); True when it must change."""
    return _compare_fields(current.fields, new.fields, "", has_rows, ignore)


def evolve_table(table, new, ignore: Collection[str] = ()):
    """`table` evolved to hold `new`'s fields (the same table when nothing changes)."""
    has_rows = table.current_snapshot() is not None
    if not check_evolution(table.schema(), new, ignore, has_rows):
        return table
    # check_evolution refused what an Iceberg reader of existing rows could
    # not take; an empty table also takes required fields (its first schema).
    with table.update_schema(allow_incompatible_changes=not has_rows) as update:
        update.union_by_name(new)
    return table
