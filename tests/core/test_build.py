"""Each stateful C source is compiled into exactly one extension (issue 12,
item 13): crc32c.c (its chosen implementation and tables) into
pylog._core.crc, records_batch.c (the legacy CRC-32 table) into pylog._core.codec;
the others reach them through capsules (core_api.h)."""

import glob
import os
import shutil
import subprocess

import pytest

import pylog._core

CORE = os.path.dirname(pylog._core.__file__)

# A symbol private to each source file, and the one extension that may hold it.
OWNERS = {"table_sw": "crc", "crc32_table": "codec"}   # static tables: data symbols


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_each_stateful_source_is_in_one_extension():
    found = {symbol: [] for symbol in OWNERS}
    for so in glob.glob(os.path.join(CORE, "*.so")):
        names = subprocess.run(["nm", so], capture_output=True, text=True).stdout
        for symbol in OWNERS:
            if any(line.split()[-1] == symbol for line in names.splitlines() if line.strip()):
                found[symbol].append(os.path.basename(so).split(".")[0])
    assert found == {symbol: [owner] for symbol, owner in OWNERS.items()}


def test_the_capsules_are_exported():
    import pylog._core.codec
    import pylog._core.crc
    assert type(pylog._core.crc._C_API).__name__ == "PyCapsule"
    assert type(pylog._core.codec._C_API).__name__ == "PyCapsule"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
@pytest.mark.parametrize("uring", [True, False], ids=["io_uring", "no-io_uring"])
def test_own_c_sources_have_no_warnings_under_wextra(uring):
    """setup.py builds pylog's own C (a .c without a .pyx of its name) with -Wextra
    and -Wunused-function, and CI makes warnings errors (PYLOG_WERROR=1); this
    checks every such source, with and without io_uring, where gcc exists."""
    import sysconfig

    sources = sorted(path for path in glob.glob(os.path.join(CORE, "*.c"))
                     if not os.path.exists(path[:-2] + ".pyx"))
    assert {"io_engine.c", "io_portable.c", "io_uring_ring.c", "io_direct.c", "records_batch.c",
            "segment_io.c", "index.c"} <= \
        {os.path.basename(path) for path in sources}
    macros = ["-DPYLOG_HAVE_IO_URING=1"] if uring else []
    if uring and not os.path.exists("/usr/include/liburing.h"):
        pytest.skip("liburing.h is not installed")
    capsules = [path for path in sources if os.path.basename(path).startswith("core_")]
    # The capsule sources differ by the extension they are built into (setup.py).
    for variant, files in ((None, sources), ("-DPYLOG_EXPORT_CRC=1", capsules),
                           ("-DPYLOG_EXPORT_RECORDS=1", capsules),
                           ("-DPYLOG_IMPORT_RECORDS=1", capsules)):
        proc = subprocess.run(
            ["gcc", "-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Wunused-function",
             "-Werror", *macros, *([variant] if variant else []), f"-I{CORE}",
             f"-I{sysconfig.get_paths()['include']}", *files],
            capture_output=True, text=True, timeout=120)
        assert 0 == proc.returncode, proc.stderr


def test_each_stub_names_every_public_name_of_its_module():
    """A .pyi beside an extension module (type checkers read it instead of the
    module) declares every public function and class the module defines, so it
    cannot go stale."""
    import ast
    import importlib

    stubs = sorted(glob.glob(os.path.join(CORE, "*.pyi")))
    assert {"crc.pyi", "engine.pyi"} <= {os.path.basename(stub) for stub in stubs}
    for stub in stubs:
        name = os.path.basename(stub)[:-4]
        module = importlib.import_module(f"pylog._core.{name}")
        with open(stub) as f:
            tree = ast.parse(f.read())
        declared = {node.name for node in tree.body
                    if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        declared |= {target.id for node in tree.body if isinstance(node, ast.AnnAssign)
                     for target in [node.target] if isinstance(target, ast.Name)}
        public = {n for n in vars(module) if not n.startswith("_") and
                  getattr(getattr(module, n), "__module__", module.__name__) == module.__name__
                  and not isinstance(getattr(module, n), type(os))}
        assert public <= declared, (name, sorted(public - declared))
