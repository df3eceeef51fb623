"""Builds pylog's C core. Metadata lives in pyproject.toml.

Environment switches:
  PYLOG_DEBUG=1     -O0 -g, Cython line tracing, PYLOG_DEBUG assertions
  PYLOG_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer
  PYLOG_NO_URING=1  build without io_uring even when liburing is installed
  PYLOG_WERROR=1    warnings in pylog's own C sources are errors (CI sets it)

pylog's own C sources (not the C that Cython generates) also build with
-Wextra and -Wunused-function.
"""
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    import Cython
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover
    sys.exit("pylog needs Cython>=3.0 to build: pip install 'Cython>=3.0,<3.4'")

if int(Cython.__version__.split(".")[0]) < 3:
    sys.exit(f"pylog needs Cython 3, found {Cython.__version__}")

CORE = "src/pylog/_core"
debug = os.environ.get("PYLOG_DEBUG") == "1"
cflags = ["-std=gnu11", "-Wall", "-Wno-unused-function", "-fno-strict-aliasing"]
sanitize = os.environ.get("PYLOG_SANITIZE") == "1"
cflags += ["-O0", "-g", "-DPYLOG_DEBUG=1"] if debug else ["-O1", "-g"] if sanitize else ["-O3", "-DNDEBUG"]
ldflags = []
if sanitize:
    # -fno-wrapv undoes CPython's -fwrapv, under which signed overflow is not
    # reported. tools/run-sanitizers builds and runs this.
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-wrapv"]
    ldflags += ["-fsanitize=address,undefined"]
macros = [("CYTHON_TRACE_NOGIL", "1")] if debug else []
# Warnings only for the C written here: a .c with no .pyx of the same name.
OWN_C = {f for f in os.listdir(CORE) if f.endswith(".c") and not os.path.exists(f"{CORE}/{f[:-2]}.pyx")}
own_cflags = ["-Wextra", "-Wunused-function"]
if os.environ.get("PYLOG_WERROR") == "1":
    own_cflags.append("-Werror")


class BuildExt(build_ext):
    """build_ext that adds own_cflags when it compiles one of OWN_C."""

    def build_extension(self, ext):
        compile_one = self.compiler._compile

        def compile_with_own_flags(obj, src, src_ext, cc_args, extra_postargs, pp_opts):
            if os.path.basename(src) in OWN_C:
                extra_postargs = [*extra_postargs, *own_cflags]
            compile_one(obj, src, src_ext, cc_args, extra_postargs, pp_opts)

        self.compiler._compile = compile_with_own_flags
        try:
            super().build_extension(ext)
        finally:
            del self.compiler._compile


def ext(name, sources, **kw):
    kw.setdefault("define_macros", macros)
    return Extension(
        f"pylog._core.{name}",
        sources=[f"{CORE}/{s}" for s in sources],
        include_dirs=[CORE],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        **kw,
    )


def have_liburing():
    if os.environ.get("PYLOG_NO_URING") == "1":
        return False
    return any(os.path.exists(f"{d}/liburing.h") for d in ("/usr/include", "/usr/local/include"))


URING = have_liburing()
# Every extension that compiles io_engine.c takes these.
ENGINE_KW = {"libraries": ["uring", "dl"], "define_macros": macros + [("PYLOG_HAVE_IO_URING", "1")]} \
    if URING else {}

# Each C source with state is compiled into exactly one extension: crc32c.c
# into crc, records_*.c into codec. The others call them through a capsule
# (core_api.h): core_export.c builds the exported table, core_import.c the
# forwarding functions of the same names.
extensions = [
    ext("crc", ["crc.pyx", "crc32c.c", "core_export.c"],
        define_macros=macros + [("PYLOG_EXPORT_CRC", "1")]),
    ext("codec", ["codec.pyx", "records_batch.c", "records_encode.c", "records_decode.c",
                  "records_validate.c", "core_export.c", "core_import.c"],
        define_macros=macros + [("PYLOG_EXPORT_RECORDS", "1")]),
    ext("engine", ["engine.pyx", "io_engine.c", "io_portable.c", "io_uring_ring.c", "io_direct.c"],
        **ENGINE_KW),
    ext("producer", ["producer.pyx"]),
    ext("avro", ["avro.pyx"]),
    ext("storage", ["storage.pyx", "index.c", "segment_io.c", "append.c", "core_import.c"],
        define_macros=macros + [("PYLOG_IMPORT_RECORDS", "1")]),
]

if not URING:
    print("pylog: liburing.h not found (or PYLOG_NO_URING=1): building without io_uring; "
          "the portable pwritev engine will be used", file=sys.stderr)


class CythonizingBuildExt(BuildExt):
    """Cythonizes the .pyx sources when the extensions are built, so that an sdist or the
    package metadata (pip's first steps) does not run Cython: the sdist carries the .pyx
    files and the hand-written C (MANIFEST.in), never Cython's output."""

    def run(self):
        done = cythonize(self.extensions,
                         compiler_directives={"language_level": "3", "embedsignature": True,
                                              "linetrace": debug},
                         include_path=["src"])
        for ext, cythonized in zip(self.extensions, done, strict=True):
            ext.sources = cythonized.sources     # .pyx -> the generated .c, in place
        super().run()


setup(ext_modules=extensions, cmdclass={"build_ext": CythonizingBuildExt})
