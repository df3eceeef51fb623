"""The import rule of docs/ARCHITECTURE.md ("What may import what"), checked
over the source: every ``import pylog...`` / ``from pylog... import`` and
every relative import of every module under src/pylog, including the
Cython ``.pyx``/``.pxi`` files (their Python imports, not their cimports).

A violation names the module, the line and the rule it breaks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pylog.storage

SRC = Path(__file__).resolve().parents[1] / "src" / "pylog"

# layer -> the layers it may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "common": {"errors"},
    # The C codec calls the codecs' Python libraries through record.compression.
    "_core": {"errors", "record.compression"},
    "record": {"_core", "errors"},
    "storage": {"_core", "errors", "common", "record"},
    "coordinator": {"_core", "errors", "common", "record", "storage", "protocol"},
    "client": {"_core", "errors", "common", "record", "storage", "coordinator"},
    "store": {"errors", "common", "storage", "coordinator"},
    # The wire protocol knows bytes only: the broker and every client share it.
    "protocol": {"errors"},
    # The broker reads produced batches' headers (record.batch_layout).
    "broker": {"errors", "common", "storage", "coordinator", "store", "protocol", "record"},
    # PySpark's source and sink: read-only readers and the store, like an application.
    "spark": {"_core", "errors", "common", "record", "storage", "store", "remote"},
    # A broker's partitions and groups for pylog's tools (Spark remote mode, the CLI).
    "remote": {"_core", "errors", "common", "record", "protocol"},
    # Kafka's perf tests (pylog perf, the tuning rig): an application of the client,
    # the store and a broker's partitions.
    "perf": {"_core", "errors", "common", "record", "storage", "store", "client", "remote",
             "protocol"},
    "cli": {"*"},
    # Prometheus exposition of store.metrics() and broker.metrics(): objects passed in.
    "metrics": set(),
    "__init__": {"*"},
}

# Layers above storage may use only the names pylog.storage exports.
STORAGE_PUBLIC_ONLY = {"coordinator", "client", "store", "broker", "spark"}


def layer_of(module: str) -> str:
    """'pylog.storage.log' -> 'storage'; 'pylog' -> '__init__'; 'pylog.error_codes' (Kafka's
    table of codes, generated) is part of the errors layer."""
    parts = module.split(".")
    layer = parts[1] if len(parts) > 1 else "__init__"
    return "errors" if layer == "error_codes" else layer


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) for each pylog import of a .py file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "pylog"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pylog":
                continue
            names = [a.name for a in node.names]
            if node.module is None or (node.level and not node.module):
                # "from . import x": each name is a submodule or a package attribute
                out += [(node.lineno, f"{target}.{n}", []) for n in names]
            else:
                out.append((node.lineno, target, names))
    return out


_CY_IMPORT = re.compile(r"^\s*(?:from\s+(pylog[\w.]*)\s+import\s+(.+)|import\s+(pylog[\w.]*))")


def cython_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if "cimport" in line:
            continue
        m = _CY_IMPORT.match(line)
        if m:
            names = [n.split(" as ")[0].strip() for n in (m.group(2) or "").strip("() ").split(",")]
            out.append((i, m.group(1) or m.group(3), [n for n in names if n]))
    return out


def submodule_targets(target: str, names: list[str]) -> list[str]:
    """``from pylog.record import compression`` imports the module
    pylog.record.compression: each name that is a submodule is its own target."""
    base = SRC.parent.joinpath(*target.split("."))
    subs = [f"{target}.{n}" for n in names if (base / f"{n}.py").exists() or (base / n).is_dir()]
    return subs or [target]


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".pyx", ".pxi"))


def target_layer(target: str) -> str:
    """The layer a target module belongs to; record.compression is named on its own."""
    if target.startswith("pylog.record.compression"):
        return "record.compression"
    return layer_of(target)


def violations() -> list[str]:
    found = []
    for path in sources():
        me = module_name(path) if path.suffix == ".py" else "pylog._core." + path.stem
        mine = layer_of(me)
        allowed = ALLOWED[mine]
        imports = python_imports(path) if path.suffix == ".py" else cython_imports(path)
        for line, target, names in [(ln, t, ns) for ln, imported, ns in imports
                                    for t in submodule_targets(imported, ns)]:
            theirs = target_layer(target)
            where = f"{path.relative_to(SRC.parent)}:{line}"
            ok = ("*" in allowed or theirs == mine or theirs in allowed
                  or (theirs == "record.compression" and "record" in allowed)
                  or (theirs == "record.compression" and mine == "record"))
            if not ok:
                found.append(f"{where}: {mine} may not import {target} ({theirs})")
                continue
            if mine in STORAGE_PUBLIC_ONLY and theirs == "storage":
                if target != "pylog.storage":
                    found.append(f"{where}: {mine} imports {target}; use the names of pylog.storage")
                else:
                    hidden = [n for n in names if n not in pylog.storage.__all__]
                    if hidden:
                        found.append(f"{where}: {', '.join(hidden)} not in pylog.storage.__all__")
    return found


def test_every_layer_imports_only_what_it_may():
    assert violations() == []


def test_every_module_belongs_to_a_known_layer():
    unknown = {layer_of(module_name(p)) for p in sources() if p.suffix == ".py"} - set(ALLOWED)
    assert not unknown, f"modules outside the layers of docs/ARCHITECTURE.md: {sorted(unknown)}"


@pytest.mark.parametrize("source, rule", [
    ("from pylog.client import Producer\n", "storage may not import pylog.client"),
    ("from pylog.coordinator.offsets import OffsetStore\n", "storage may not import pylog.coordinator"),
    ("from ..client.producer import Producer\n", "storage may not import pylog.client.producer"),
])
def test_a_violation_is_caught(tmp_path, monkeypatch, source, rule):
    """The checker itself: a storage module importing upwards is reported."""
    fake = tmp_path / "pylog"
    (fake / "storage").mkdir(parents=True)
    (fake / "storage" / "bad.py").write_text(source)
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    assert any(rule in v for v in violations()), violations()


def test_a_deep_storage_import_from_above_is_caught(tmp_path, monkeypatch):
    fake = tmp_path / "pylog"
    (fake / "client").mkdir(parents=True)
    (fake / "client" / "bad.py").write_text("from pylog.storage.log import Log\n"
                                            "from pylog.storage import _private\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    found = violations()
    assert any("use the names of pylog.storage" in v for v in found), found
    assert any("_private not in pylog.storage.__all__" in v for v in found), found
