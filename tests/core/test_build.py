"""Each stateful C source is compiled into exactly one extension (issue 12,
item 13): crc32c.c (its chosen implementation and tables) into
pylog._core.crc, records.c (the legacy CRC-32 table) into pylog._core.codec;
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
