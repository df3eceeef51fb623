"""The type stubs of the compiled extensions (src/pylog/_core/<module>.pyi, shipped in the
wheel beside the .so) against the modules themselves, so a stub cannot drift: every
public name of a module is in its stub and every public name of a stub is in the module;
the same for the public members of each class the module defines (its own and inherited
from its other classes); and every function or method with an inspectable signature
(Cython's cyfunctions, Python functions) has the stub's parameters: the same names, in
the same order, of the same kinds, with a default where the module has one.

"Public" is a name without a leading underscore; a module's imported modules (``os``,
``numpy as np``) are not its names. A stub re-exports a name as ``from x import N as N``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import re
import types
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "src" / "pylog" / "_core"
EXTENSIONS = sorted(p.stem for p in CORE.glob("*.pyx"))
DESCRIPTORS = (property, types.GetSetDescriptorType, types.MemberDescriptorType)


def public(name: str) -> bool:
    return not name.startswith("_")


def stub_names(tree: ast.Module) -> dict[str, ast.AST]:
    """The names a stub defines at its top level (re-exports included)."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            out.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            # Only `import x as x` / `from m import x as x` re-export (PEP 484).
            out.update((a.asname, node) for a in node.names if a.asname and a.asname == a.name)
    return out


def class_members(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> dict[str, ast.AST]:
    """A stub class's members, with those of its bases defined in the same stub."""
    out: dict[str, ast.AST] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out.update(class_members(classes[base.id], classes))
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def runtime_members(cls: type, module: str) -> dict[str, object]:
    """A class's attributes defined by it or by its bases of the same module."""
    out: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ == module:
            out.update(vars(klass))
    return out


def stub_parameters(fn: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    out = [(p.arg,
            "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD",
            i >= first_default) for i, p in enumerate(positional)]
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", False))
    out += [(p.arg, "KEYWORD_ONLY", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", False))
    return out


def runtime_parameters(obj: object) -> list[tuple[str, str, bool]] | None:
    """The parameters of a cyfunction or Python function; None for what has no signature
    to read (a C slot wrapper such as a cdef class's ``__init__``)."""
    if not hasattr(obj, "__code__"):
        return None
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(obj).parameters.values()]


def compare_signature(where: str, stub: ast.FunctionDef, obj: object) -> list[str]:
    runtime = runtime_parameters(obj)
    if runtime is None:
        return []
    mine = stub_parameters(stub)
    if mine != runtime:
        return [f"{where}: stub parameters {mine} != module's {runtime}"]
    return []


def problems(module: types.ModuleType, stub_source: str) -> list[str]:
    """Every disagreement between a compiled module and the text of its stub."""
    name = module.__name__.rpartition(".")[2]
    tree = ast.parse(stub_source, f"{name}.pyi")
    in_stub = stub_names(tree)
    classes = {n: node for n, node in in_stub.items() if isinstance(node, ast.ClassDef)}
    in_module = {n: v for n, v in vars(module).items() if not isinstance(v, types.ModuleType)}
    if "__getattr__" in in_module:      # PEP 562: names the module builds on first use
        for n in set(in_stub) - set(in_module):
            with contextlib.suppress(AttributeError):
                in_module[n] = getattr(module, n)
    found = [f"{name}.{n}: in the module, not in {name}.pyi"
             for n in sorted(set(filter(public, in_module)) - set(in_stub))]
    found += [f"{name}.{n}: in {name}.pyi, not in the module"
              for n in sorted(set(filter(public, in_stub)) - set(in_module))]
    for n, node in sorted(in_stub.items()):
        obj = in_module.get(n)
        if obj is None:
            continue
        if isinstance(node, ast.FunctionDef):
            found += compare_signature(f"{name}.{n}", node, obj)
        elif isinstance(node, ast.ClassDef):
            if not (isinstance(obj, type) and obj.__module__ == module.__name__):
                found.append(f"{name}.{n}: a class in {name}.pyi, not a class of the module")
                continue
            found += class_problems(f"{name}.{n}", class_members(node, classes), obj,
                                    module.__name__)
    return found


def class_problems(where: str, stub: dict[str, ast.AST], cls: type, module: str) -> list[str]:
    members = runtime_members(cls, module)
    found = [f"{where}.{m}: in the module, not in the stub"
             for m in sorted(set(filter(public, members)) - set(stub))]
    found += [f"{where}.{m}: in the stub, not in the module"
              for m in sorted(set(filter(public, stub)) - set(members))]
    for m, node in sorted(stub.items()):
        if m not in members:
            continue
        attribute = members[m]
        is_property = isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
        if is_property or isinstance(node, ast.AnnAssign):
            if not isinstance(attribute, DESCRIPTORS):
                found.append(f"{where}.{m}: an attribute in the stub, "
                             f"a {type(attribute).__name__} in the module")
        elif isinstance(node, ast.FunctionDef):
            if isinstance(attribute, DESCRIPTORS):
                found.append(f"{where}.{m}: a method in the stub, an attribute in the module")
            else:
                found += compare_signature(f"{where}.{m}", node, getattr(cls, m))
    return found


def test_every_extension_has_a_stub_and_every_stub_an_extension():
    """setup.py's extensions, the .pyx files and the .pyi stubs are the same names."""
    built = re.findall(r'^\s*ext\("(\w+)"', (CORE.parents[2] / "setup.py").read_text(), re.M)
    assert EXTENSIONS and sorted(built) == EXTENSIONS
    assert sorted(p.stem for p in CORE.glob("*.pyi")) == EXTENSIONS


@pytest.mark.parametrize("name", EXTENSIONS)
def test_the_stub_matches_the_module(name):
    module = importlib.import_module(f"pylog._core.{name}")
    assert problems(module, (CORE / f"{name}.pyi").read_text()) == []


def test_a_drifted_stub_is_caught():
    """The checker itself, on a copy of storage.pyi with a function missing, a parameter
    renamed, a name the module lacks and a method turned into an attribute."""
    import pylog._core.storage as storage

    text = (CORE / "storage.pyi").read_text()
    drifted = (text.replace("def use_fast_append(on: bool) -> bool: ...\n", "")
               .replace("def sendfile(self, out_fd: int,", "def sendfile(self, fd: int,")
               .replace("    def fileno(self) -> int: ...\n", "    fileno: int\n")
               + "def no_such_function() -> None: ...\n")
    assert drifted != text
    found = problems(storage, drifted)
    assert "storage.use_fast_append: in the module, not in storage.pyi" in found, found
    assert "storage.no_such_function: in storage.pyi, not in the module" in found, found
    assert any(p.startswith("storage.LogFile.sendfile: stub parameters") for p in found), found
    assert any(p.startswith("storage.LogFile.fileno: an attribute in the stub") for p in found), found
    assert len(found) == 4, found
