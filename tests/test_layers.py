"""The import rule of docs/ARCHITECTURE.md ("What may import what"), checked
over the source: every ``import pylog...`` / ``from pylog... import`` and
every relative import of every module under src/pylog and src/pyspark_pylog,
including the Cython ``.pyx``/``.pxd``/``.pxi`` files: their Python imports
and their ``cimport``s, absolute and relative, at any depth.

Two reaches that imports do not show are checked too:
- an import cycle between layers (modules of two layers importing each other
  at import time, a package's ``__init__`` counted as imported with any of
  its modules), which works only in one import order;
- the compiled core reaching into the upper-layer subclasses of its own
  classes (storage's ``Log(LogState)``, client's ``Producer(ProducerBase)``...):
  a member such a subclass defines and the core's class does not declare,
  used by the core's C. The known ones are listed in CORE_REACHES, each
  with its reason; a new one fails, and so does an entry no longer found.

A violation names the module, the line and the rule it breaks.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import pylog.storage

SRC = Path(__file__).resolve().parents[1] / "src" / "pylog"

# layer -> the layers it may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "common": {"errors"},
    # The codecs' libraries: the C codec calls them, and so may whoever may read records.
    "compression": {"errors"},
    "_core": {"errors", "compression"},
    "record": {"_core", "errors", "compression"},
    "storage": {"_core", "errors", "common", "record", "compression"},
    "coordinator": {"_core", "errors", "common", "record", "compression", "storage", "protocol"},
    "client": {"_core", "errors", "common", "record", "compression", "storage", "coordinator"},
    # Topics as tables: reads segment files (storage's readers, the C Arrow decoder) and
    # writes Iceberg tables; the store runs its converters, the CLI, broker and Spark use it.
    "table": {"_core", "errors", "common", "record", "compression", "storage"},
    "store": {"errors", "common", "storage", "coordinator", "table"},
    # The wire protocol knows bytes only: the broker and every client share it.
    "protocol": {"errors", "common"},
    # The broker reads produced batches' headers (record.batch_layout) and codec ids.
    "broker": {"errors", "common", "storage", "coordinator", "store", "protocol", "record", "compression",
               "table"},
    # PySpark's source and sink: read-only readers and the store, like an application.
    "spark": {"_core", "errors", "common", "record", "compression", "storage", "store", "remote", "table"},
    # A broker's partitions and groups for pylog's tools (Spark remote mode, the CLI).
    "remote": {"_core", "errors", "common", "record", "compression", "protocol"},
    # Kafka's perf tests (pylog perf, the tuning rig): an application of the client,
    # the store and a broker's partitions.
    "perf": {"_core", "errors", "common", "record", "compression", "storage", "store", "client",
             "remote", "protocol"},
    "cli": {"*"},
    # Prometheus exposition of store.metrics() and broker.metrics(): objects passed in.
    "metrics": set(),
    "__init__": {"*"},
    # src/pyspark_pylog, outside the package: Spark's entry point to pylog.spark.
    "pyspark_pylog": {"spark"},
}

# Layers above storage may use only the names pylog.storage exports.
STORAGE_PUBLIC_ONLY = {"coordinator", "client", "store", "broker", "spark", "table"}

# The core's known reaches into its classes' upper-layer subclasses, (core file, member)
# -> why; a new reach fails the test. The core's classes declare what they need of their
# subclasses (LogState: the append's Python path, undo, storage errors, the producer table;
# ProducerBase: the direct path's hooks; RecordFutureBase: add_done_callback), so what is
# left here are names of concurrent.futures.Future's own protocol, which RecordFuture
# (a Future) also defines.
_FUTURE = ("send_batch's fast path makes a concurrent.futures.Future (failed) or a "
           "CompletedFuture (its _result): Future's protocol, which RecordFuture also defines")
CORE_REACHES: dict[tuple[str, str], str] = {
    ("_core/producer_direct.pxi", "_result"): _FUTURE,
    ("_core/producer_direct.pxi", "set_exception"): _FUTURE,
}

CYTHON = (".pyx", ".pxd", ".pxi")


def layer_of(module: str) -> str:
    """'pylog.storage.log' -> 'storage'; 'pylog' -> '__init__'; 'pylog.error_codes' (Kafka's
    table of codes, generated) is part of the errors layer."""
    parts = module.split(".")
    layer = parts[1] if len(parts) > 1 else "__init__"
    return "errors" if layer == "error_codes" else layer


def layer_of_module(module: str) -> str:
    """layer_of for pylog's modules; a top-level package beside pylog is its own layer."""
    return layer_of(module) if module.split(".")[0] == "pylog" else module.split(".")[0]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def includers() -> dict[Path, Path]:
    """Each .pxi -> the .pyx that includes it (a .pxi is part of that module)."""
    out = {}
    for pyx in SRC.rglob("*.pyx"):
        for name in re.findall(r'^include\s+"([^"]+)"', pyx.read_text(encoding="utf-8"), re.M):
            out[(pyx.parent / name).resolve()] = pyx
    return out


def owner_module(path: Path, included: dict[Path, Path]) -> str:
    """The module a source file is part of."""
    return module_name(included.get(path.resolve(), path))


def _resolve(package: str, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def python_imports(path: Path) -> list[tuple[int, str, list[str], bool]]:
    """(line, absolute module, imported names, at import time) for each pylog import of a
    .py file; imports inside a function run when it is called, not at import time."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []

    def visit(node, at_import):
        for child in ast.iter_child_nodes(node):
            now = at_import and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((child.lineno, a.name, [], now) for a in child.names
                           if a.name.split(".")[0] == "pylog")
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(package, child.level, child.module)
                if target.split(".")[0] == "pylog":
                    names = [a.name for a in child.names]
                    if child.module is None:
                        # "from . import x": each name is a submodule or a package attribute
                        out.extend((child.lineno, f"{target}.{n}", [], now) for n in names)
                    else:
                        out.append((child.lineno, target, names, now))
            visit(child, now)

    visit(tree, True)
    return out


def cython_statements(text: str):
    """(line, column, [token strings]) of each logical statement of Cython source, without
    comments and strings (so a docstring's "from x import" is no import)."""
    statement, start = [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if statement:
                yield start[0], start[1], statement
            statement, start = [], None
        elif tok.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER):
            if start is None:
                start = tok.start
            statement.append(tok.string)
        elif tok.type == tokenize.STRING and start is None:
            start = tok.start           # a docstring statement: no tokens kept


def _names_after(tokens: list[str]) -> list[str]:
    """The imported names of `... import a as b, c`: a and c."""
    names, skip = [], False
    for t in tokens:
        if t in ("(", ")", ","):
            continue
        if t == "as":
            skip = True
        elif skip:
            skip = False
        elif t != ".":
            names.append(t)
    return names


def cython_imports(path: Path) -> list[tuple[int, str, list[str], bool]]:
    """(line, absolute module, imported names, at import time) of each pylog import and
    cimport of a .pyx/.pxd/.pxi (absolute or relative; a .pxi resolves from its .pyx's
    package). A cimport is at import time when its module is compiled (a .pyx): Cython
    imports it to reach its types."""
    package = module_name(path).rpartition(".")[0]
    out = []
    for line, col, toks in cython_statements(path.read_text(encoding="utf-8")):
        at_import = col == 0
        if toks[0] == "from":
            kw = next((i for i, t in enumerate(toks) if t in ("import", "cimport")), None)
            if kw is None:
                continue
            spec, level = toks[1:kw], 0
            while spec and set(spec[0]) == {"."}:      # "." tokens, or one "..."
                level += len(spec.pop(0))
            module = "".join(spec) or None
            target = _resolve(package, level, module)
            if target.split(".")[0] != "pylog":
                continue
            names = _names_after(toks[kw + 1:])
            if module is None:
                out.extend((line, f"{target}.{n}", [], at_import) for n in names)
            else:
                out.append((line, target, names, at_import))
        elif toks[0] in ("import", "cimport"):
            dotted, skip = [], False
            for t in toks[1:] + [","]:
                if t == ",":
                    if dotted and "".join(dotted).split(".")[0] == "pylog":
                        out.append((line, "".join(dotted), [], at_import))
                    dotted, skip = [], False
                elif t == "as":
                    skip = True
                elif not skip:
                    dotted.append(t)
    return out


def imports_of(path: Path) -> list[tuple[int, str, list[str], bool]]:
    return python_imports(path) if path.suffix == ".py" else cython_imports(path)


def submodule_targets(target: str, names: list[str]) -> list[str]:
    """``from pylog.record import compression`` imports the module
    pylog.record.compression: each name that is a submodule is its own target."""
    base = SRC.parent.joinpath(*target.split("."))
    subs = [f"{target}.{n}" for n in names
            if any((base / f"{n}{s}").exists() for s in (".py", ".pyx", ".pxd")) or (base / n).is_dir()]
    return subs or [target]


def sources() -> list[Path]:
    roots = [SRC, SRC.parent / "pyspark_pylog"]
    return sorted(p for root in roots if root.exists()
                  for p in root.rglob("*") if p.suffix in (".py", *CYTHON))


def target_layer(target: str) -> str:
    return layer_of(target)


def violations() -> list[str]:
    found = []
    included = includers()
    for path in sources():
        mine = layer_of_module(owner_module(path, included))
        allowed = ALLOWED[mine]
        for line, target, names in [(ln, t, ns) for ln, imported, ns, _ in imports_of(path)
                                    for t in submodule_targets(imported, ns)]:
            theirs = target_layer(target)
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if not ("*" in allowed or theirs == mine or theirs in allowed):
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


def import_time_graph() -> dict[str, set[str]]:
    """module -> the pylog modules importing it runs (packages' __init__ included, pylog's
    own excepted: whoever imports a pylog module has run it first)."""
    graph: dict[str, set[str]] = {}
    included = includers()
    for path in sources():
        me = owner_module(path, included)
        edges = graph.setdefault(me, set())
        for _, imported, names, at_import in imports_of(path):
            if not at_import:
                continue
            for target in submodule_targets(imported, names):
                parts = target.split(".")
                edges.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {m: {t for t in ts if t != m} for m, ts in graph.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cycles_between_layers() -> list[str]:
    found = []
    for component in strongly_connected(import_time_graph()):
        layers = sorted({layer_of_module(m) for m in component})
        if len(layers) > 1:
            found.append(f"an import cycle between {', '.join(layers)}: {', '.join(component)}")
    return found


def _code_tokens(path: Path):
    """(line, token) of a Cython file without comments and strings."""
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type in (tokenize.NAME, tokenize.OP):
            yield tok.start[0], tok.string


def core_declared_names(core: list[Path]) -> set[str]:
    """Every name the core's sources define or declare (cdef attributes and functions,
    defs, assignments): a member of the core's own classes is never a reach."""
    names: set[str] = set()
    for path in core:
        for _, _, toks in cython_statements(path.read_text(encoding="utf-8")):
            if toks[0] in ("cdef", "cpdef", "ctypedef", "def", "class"):
                names.update(t for t in toks if t.isidentifier())
            names.update(toks[i + 2] for i in range(len(toks) - 3)
                         if toks[i] == "self" and toks[i + 1] == "." and toks[i + 3] == "=")
            if len(toks) > 1 and toks[1] == "=":
                names.add(toks[0])
    return names


def core_reaches() -> dict[tuple[str, str], list[int]]:
    """(core file, member) -> lines: members of the core's classes' upper-layer subclasses
    that the core uses and does not declare itself."""
    core = [p for p in (SRC / "_core").rglob("*") if p.suffix in CYTHON]
    core_classes = set()
    for path in core:
        core_classes.update(re.findall(r"^(?:cdef\s+)?class\s+(\w+)", path.read_text(encoding="utf-8"), re.M))
    classes: dict[str, list[ast.ClassDef]] = {}    # pylog's Python classes by name
    for path in sources():
        if path.suffix == ".py":
            for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(cls, ast.ClassDef):
                    classes.setdefault(cls.name, []).append(cls)

    def base_names(cls: ast.ClassDef) -> list[str]:
        return [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases
                if isinstance(b, (ast.Name, ast.Attribute))]

    # A subclass of a core class, with its other pylog bases (the mixins that make it
    # up, such as client.Producer's Sender and BatchPlanner): the core reaches them all.
    todo = [cls for group in classes.values() for cls in group
            if set(base_names(cls)) & core_classes]
    seen: set[int] = set()
    subclass_members: set[str] = set()
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        todo.extend(base for name in base_names(cls) if name not in core_classes
                    for base in classes.get(name, ()))
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                subclass_members.add(node.name)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                subclass_members.add(node.attr)
    upward = subclass_members - core_declared_names(core)
    found: dict[tuple[str, str], list[int]] = {}
    for path in core:
        toks = list(_code_tokens(path))
        for i in range(1, len(toks)):
            line, name = toks[i]
            if toks[i - 1][1] == "." and name in upward:
                found.setdefault((path.relative_to(SRC).as_posix(), name), []).append(line)
    return found


def test_every_layer_imports_only_what_it_may():
    assert violations() == []


def test_every_module_belongs_to_a_known_layer():
    included = includers()
    unknown = {layer_of_module(owner_module(p, included)) for p in sources()} - set(ALLOWED)
    assert not unknown, f"modules outside the layers of docs/ARCHITECTURE.md: {sorted(unknown)}"


def test_the_layers_allowed_form_no_cycle():
    graph = {layer: {t for t in allowed if t != "*" and t != layer}
             for layer, allowed in ALLOWED.items() if "*" not in allowed}
    assert strongly_connected(graph) == []


def test_no_import_cycle_between_layers():
    assert cycles_between_layers() == []


def test_the_core_reaches_into_upper_layers_only_where_listed():
    found = core_reaches()
    new = {f"{f}:{lines[0]}: .{name}": "" for (f, name), lines in found.items()
           if (f, name) not in CORE_REACHES}
    assert not new, f"the core uses members of an upper layer's subclass: {sorted(new)}"
    gone = sorted(set(CORE_REACHES) - set(found))
    assert not gone, f"listed in CORE_REACHES but no longer used (remove them): {gone}"


def test_the_sources_read_include_cython_and_pyspark_pylog():
    names = {p.relative_to(SRC.parent).as_posix() for p in sources()}
    assert {"pylog/_core/codec.pyx", "pylog/_core/engine.pxd", "pylog/_core/storage_append.pxi",
            "pyspark_pylog/__init__.py"} <= names
    cimports = [(target, imported) for _, target, imported, _ in cython_imports(SRC / "_core" / "storage.pyx")]
    assert ("pylog._core.engine", ["IoEngine"]) in cimports, cimports


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


@pytest.mark.parametrize("name, source, rule", [
    ("bad.pyx", "from pylog.storage.log import Log\n", "_core may not import pylog.storage.log"),
    ("bad.pxd", "from pylog.client.producer cimport Producer\n",
     "_core may not import pylog.client.producer"),
    ("bad.pxi", '"""from pylog.client import x: a docstring"""\n'
                "def f():\n    from ..storage import (\n        Log,\n    )\n",
     "_core may not import pylog.storage"),
    ("bad.pyx", "cimport pylog.coordinator.group as g\n", "_core may not import pylog.coordinator.group"),
    ("bad.pyx", "from ..client cimport producer\n", "_core may not import pylog.client.producer"),
])
def test_a_cython_violation_is_caught(tmp_path, monkeypatch, name, source, rule):
    """Cython imports and cimports, absolute, relative and over several lines, in a
    .pyx, .pxd or .pxi; a docstring is not an import."""
    fake = tmp_path / "pylog"
    (fake / "_core").mkdir(parents=True)
    (fake / "client").mkdir()
    (fake / "client" / "producer.pxd").write_text("")
    (fake / "_core" / name).write_text(source)
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    found = violations()
    assert [v for v in found if rule in v] and len(found) == 1, found


def test_pyspark_pylog_is_checked(tmp_path, monkeypatch):
    fake = tmp_path / "pylog"
    fake.mkdir()
    (tmp_path / "pyspark_pylog").mkdir()
    (tmp_path / "pyspark_pylog" / "__init__.py").write_text("from pylog.spark import X\n"
                                                             "from pylog.broker import Broker\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    assert violations() == ["pyspark_pylog/__init__.py:2: pyspark_pylog may not import "
                            "pylog.broker (broker)"]


def test_an_import_cycle_between_layers_is_caught(tmp_path, monkeypatch):
    """record <-> _core as it was: the codec imported the compression module from inside
    the record package, whose __init__ imports the codec."""
    fake = tmp_path / "pylog"
    (fake / "record").mkdir(parents=True)
    (fake / "_core").mkdir()
    (fake / "record" / "__init__.py").write_text("from pylog._core.codec import encode_batch\n")
    (fake / "record" / "compression.py").write_text("import zlib\n")
    (fake / "_core" / "codec.pyx").write_text("from pylog.record import compression as _c\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    assert cycles_between_layers() == [
        "an import cycle between _core, record: pylog._core.codec, pylog.record"]
    # A function-level import runs later: no cycle at import time.
    (fake / "_core" / "codec.pyx").write_text("def f():\n    from pylog.record import compression\n")
    assert cycles_between_layers() == []


def test_a_core_reach_into_a_subclass_is_caught(tmp_path, monkeypatch):
    fake = tmp_path / "pylog"
    (fake / "_core").mkdir(parents=True)
    (fake / "storage").mkdir()
    (fake / "_core" / "storage.pyx").write_text(
        "cdef class LogState:\n    cdef public object config\n\n"
        "def append(LogState log):\n    # log._in_a_comment()\n    log.config\n"
        "    return log._private_path()\n")
    (fake / "storage" / "log.py").write_text(
        "from pylog._core.storage import LogState\n\n"
        "class Log(LogState):\n    def _private_path(self):\n        return self.config\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    assert core_reaches() == {("_core/storage.pyx", "_private_path"): [7]}


def test_a_deep_storage_import_from_above_is_caught(tmp_path, monkeypatch):
    fake = tmp_path / "pylog"
    (fake / "client").mkdir(parents=True)
    (fake / "client" / "bad.py").write_text("from pylog.storage.log import Log\n"
                                            "from pylog.storage import _private\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    found = violations()
    assert any("use the names of pylog.storage" in v for v in found), found
    assert any("_private not in pylog.storage.__all__" in v for v in found), found


def test_the_core_base_shadows_no_member_of_a_mixin():
    """Log and Producer are a core class and mixins (Log(LogState, LogTransactions,
    LogRetention), Producer(BatchPlanner, Sender, ProducerBase)). The core class declares
    the hooks its C calls (raising NotImplementedError until a subclass provides them): a
    member of the core class that came before a mixin in the MRO would silently win over
    the mixin's method of the same name, so every mixin member must resolve to the mixin."""
    from pylog._core.producer import ProducerBase
    from pylog._core.storage import LogState
    from pylog.client.producer import Producer
    from pylog.storage.log import Log
    for cls, core in ((Log, LogState), (Producer, ProducerBase)):
        mixins = [b for b in cls.__bases__ if b is not core]
        assert mixins
        for mixin in mixins:
            for name in vars(mixin):
                if name.startswith("__"):
                    continue
                owner = next(c for c in cls.__mro__ if name in vars(c))
                assert owner is not core, f"{core.__name__} shadows {mixin.__name__}.{name} in {cls.__name__}"
