"""The installed package: the public API of pylog/__init__.py and the console script; the
sdist (what pip builds from) and the binary wheel's contents. tools/build-wheel builds the
wheel from the sdist, repairs it with auditwheel and installs it where no compiler is."""

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import pylog

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = ("open", "Store", "Log", "Producer", "Consumer", "TopicPartition", "records", "errors",
          "crc32c", "io_engine")


def test_public_api_names():
    for name in PUBLIC:
        assert name in pylog.__all__ and getattr(pylog, name) is not None, name
    assert pylog.records.encode_batch is pylog.record.encode_batch


def test_the_store_is_storage_plus_the_coordinator(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        assert isinstance(store, pylog.Store) and isinstance(store, pylog.storage.LogManager)
        store.create_topic("t", 1)
        store.commit_offsets("g", {("t", 0): 3})
        assert store.coordinator.committed("g", "t", 0) == 3 == store.committed("g", "t", 0)


def test_console_script_runs(tmp_path):
    """`pip install` declares a `pylog` command; it must start (not ModuleNotFoundError)."""
    script = os.path.join(os.path.dirname(sys.executable), "pylog")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "pylog.cli"]
    out = subprocess.run(command + ["--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"pylog {pylog.__version__}")
    helped = subprocess.run(command + ["--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "Usage: pylog" in helped.stdout


def test_import_pylog_leaves_the_heavy_optional_layers_unloaded():
    """`import pylog` (and so every CLI command) does not load the wire protocol
    (~90 ms), pyarrow.compute (~50 ms), the broker or Spark: they load when used."""
    probe = ("import sys, pylog; print(' '.join(m for m in ('pylog.protocol', 'pyarrow.compute', "
             "'pylog.broker', 'pylog.spark', 'pyspark') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_reading_a_store_leaves_numpy_pyarrow_and_the_codecs_unloaded(tmp_path):
    """Opening a store and reading its batches (what `pylog topics`, `dump-log` and
    `console-consumer` do) imports neither numpy, pyarrow nor a compression library:
    the codec, the cleaner and pylog.compression import them on first use."""
    probe = (
        "import sys\n"
        "from pylog.storage import LogManager\n"
        "with LogManager([sys.argv[1]]) as m:\n"
        "    m.create_topic('t', 1)\n"
        "    m.log('t', 0).append_records([b'a', b'b'], timestamps=5)\n"
        "    got = [r.value for r in m.log('t', 0).read(0).records()]\n"
        "assert got == [b'a', b'b'], got\n"
        "heavy = ('numpy', 'pyarrow', 'cramjam', 'lz4', 'zstandard', 'isal')\n"
        "print(' '.join(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_codec_takes_arrow_input_and_gives_arrow_after_a_lazy_import():
    """In a fresh process, pyarrow imported after the codec: an Arrow column is still
    taken as one (not as a sequence), and decode_arrow and ARROW_SCHEMA agree."""
    probe = (
        "from pylog import record\n"
        "import pyarrow as pa\n"
        "data = record.encode_batch(pa.array(['x', 'yy']), timestamps=[1, 2])\n"
        "rows = record.decode_arrow(data)\n"
        "assert rows.schema == record.ARROW_SCHEMA, rows.schema\n"
        "assert rows.column('value').to_pylist() == [b'x', b'yy']\n"
        "assert rows.column('timestamp').cast(pa.int64()).to_pylist() == [1, 2]\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def source_files() -> set[str]:
    """What a build needs from src/: the Python modules, the C sources and headers, the
    Cython sources (.pyx, .pxd, .pxi), the stubs and py.typed; not Cython's output (the
    X.c beside an X.pyx), compiled modules or caches."""
    wanted = {".py", ".c", ".h", ".pyx", ".pxd", ".pxi", ".pyi"}
    found = set()
    for path in (ROOT / "src").rglob("*"):
        rel = path.relative_to(ROOT)
        if not path.is_file() or "__pycache__" in rel.parts or rel.parts[1].endswith(".egg-info"):
            continue
        if path.suffix == ".c" and path.with_suffix(".pyx").exists():
            continue
        if path.suffix in wanted or path.name == "py.typed":
            found.add(rel.as_posix())
    return found


def test_the_sdist_carries_every_source_a_build_needs(tmp_path):
    """The sdist `python -m build --sdist` makes (setuptools' PEP 517 hook, called directly)
    has every C, header and Cython file under src/, the LICENSE, and no build output."""
    hook = ("import sys; from setuptools import build_meta; "
            "print('SDIST', build_meta.build_sdist(sys.argv[1]))")
    out = subprocess.run([sys.executable, "-c", hook, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    name = out.stdout.split("SDIST ")[-1].strip()
    assert name == f"pylog_kafka-{pylog.__version__}.tar.gz"
    with tarfile.open(tmp_path / name) as tar:
        files = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile()}
        info = tar.extractfile(files["PKG-INFO"]).read().decode()
        license_text = tar.extractfile(files["LICENSE"]).read().decode() if "LICENSE" in files else ""
    in_src = {n for n in files if n.startswith("src/") and ".egg-info/" not in n}
    needed = source_files()
    assert {n for n in needed if n.endswith((".h", ".pxd", ".pxi"))}, "the tree has headers"
    assert sorted(needed - in_src) == [], "missing from the sdist"
    assert sorted(in_src - needed) == [], "build output in the sdist"
    assert {"LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in"} <= set(files)
    assert "Name: pylog-kafka\n" in info and "License-Expression: Apache-2.0\n" in info
    assert "Apache License\n                           Version 2.0" in license_text


EXTENSIONS = ("crc", "codec", "engine", "producer", "storage")


def test_the_wheel_carries_what_runs_and_no_source(tmp_path):
    """The wheel setuptools builds from this tree (bdist_wheel, reusing the extensions
    compiled in place, so no compiler runs here): every module under src/, the five
    compiled extensions, the stubs and py.typed, the LICENSE, the `pylog` command and the
    name pylog-kafka; no C or Cython source."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = [ROOT / "src" / "pylog" / "_core" / f"{name}{suffix}" for name in EXTENSIONS]
    if not all(path.exists() for path in built):
        pytest.skip("the C core is not built in place (tools/setup.sh builds it)")
    lib = tmp_path / "lib"
    (lib / "pylog" / "_core").mkdir(parents=True)
    for path in built:           # copied now, so newer than their sources: not recompiled
        shutil.copy(path, lib / "pylog" / "_core")
    out = subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", str(tmp_path / "build"),
                          "--build-lib", str(lib), "bdist_wheel", "--bdist-dir", str(tmp_path / "bdist"),
                          "--dist-dir", str(tmp_path / "dist")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    [wheel] = (tmp_path / "dist").iterdir()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"pylog_kafka-{pylog.__version__}-{tag}-{tag}-linux_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"pylog_kafka-{pylog.__version__}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    modules = {p.removeprefix("src/") for p in source_files() if p.endswith(".py")}
    assert sorted(modules - names) == [], "modules missing from the wheel"
    assert {f"pylog/_core/{name}{suffix}" for name in EXTENSIONS} <= names
    assert {"pylog/py.typed", f"{info}/licenses/LICENSE"} <= names
    assert {f"pylog/_core/{name}.pyi" for name in EXTENSIONS} <= names, "stubs missing from the wheel"
    sources = sorted(n for n in names if n.endswith((".c", ".h", ".pyx", ".pxd", ".pxi")))
    assert sources == [], "C or Cython sources in the wheel"
    assert "Name: pylog-kafka\n" in metadata and "License-Expression: Apache-2.0\n" in metadata
    assert "Requires-Dist: pyarrow>=14\n" in metadata
    assert "pylog = pylog.cli:main" in entry_points
