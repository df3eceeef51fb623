"""CRC-32C: known answers, the extend property, and independent oracles."""

import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pylog._core.crc import crc32c, crc32c_implementation, crc32c_portable

import pylog

crc32c_oracle = pytest.importorskip("crc32c", reason="the crc32c package is the oracle").crc32c

# RFC 3720 appendix B.4, plus the customary "123456789" check value.
KNOWN = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"123456789", 0xE3069283),
    (b"", 0),
]


class TestCrc32c:
    @pytest.mark.parametrize(("data", "expected"), KNOWN)
    def test_known_answers(self, data, expected):
        """Both implementations reproduce the RFC 3720 test vectors."""
        assert expected == crc32c(data)
        assert expected == crc32c_portable(data)

    def test_extend(self):
        """crc32c(b, crc32c(a)) == crc32c(a + b), as LevelDB's Extend."""
        assert crc32c(b"hello world") == crc32c(b"world", crc32c(b"hello "))

    def test_public_alias(self):
        """pylog.crc32c is the same function."""
        assert pylog.crc32c is crc32c

    def test_hardware_path_chosen(self):
        """On x86-64 with SSE4.2 a hardware path passes its self-test and is used:
        VPCLMULQDQ folding on 512-bit vectors when the CPU has it with AVX-512, on
        256-bit vectors with AVX2 alone, else the crc32 instruction."""
        flags = ""
        if os.path.exists("/proc/cpuinfo"):
            with open("/proc/cpuinfo") as f:
                flags = f.read()
        if " sse4_2" not in flags:
            pytest.skip("CPU has no SSE4.2")
        vpclmul = all(f" {f}" in flags for f in ("vpclmulqdq", "pclmulqdq", "avx512f",
                                                  "avx512vl", "avx512bw"))
        vpclmul256 = all(f" {f}" in flags for f in ("vpclmulqdq", "pclmulqdq", "avx2"))
        expected = "avx512-vpclmulqdq" if vpclmul else "avx2-vpclmulqdq" if vpclmul256 else \
            "sse4.2"
        assert expected == crc32c_implementation()

    @pytest.mark.parametrize("length", [0, 1, 7, 8, 15, 16, 17, 63, 64, 65, 79, 127, 128, 255,
                                        256, 257, 271, 287, 319, 383, 384, 399, 400, 415, 511,
                                        512, 767, 768, 769, 4096, 16384,
                                        24575, 24576, 24577, 65536 + 13, 1 << 20])
    @pytest.mark.parametrize("offset", [0, 1, 3, 7])
    def test_lengths_and_alignments(self, length, offset):
        """Every length around the three-way block sizes and every alignment agrees with the oracle."""
        data = random.Random(length * 31 + offset).randbytes(length + offset)
        view = memoryview(data)[offset:]
        assert crc32c_oracle(view) == crc32c(view)
        assert crc32c_oracle(view) == crc32c_portable(view)

    @pytest.mark.parametrize("length", [64, 65, 67, 100, 255, 256, 300, 4096 + 5, 16384])
    def test_every_alignment(self, length):
        """Data starting at each of the 64 offsets in a cache line agrees with the oracle."""
        data = bytearray(random.Random(length).randbytes(length + 64))
        for offset in range(64):
            view = memoryview(data)[offset:offset + length]
            assert crc32c_oracle(view, offset) == crc32c(view, offset)

    @settings(max_examples=300)
    @given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
    def test_matches_oracle(self, data, seed):
        """Random data with a random starting value agrees with the crc32c package."""
        assert crc32c_oracle(data, seed) == crc32c(data, seed)
        assert crc32c(data, seed) == crc32c_portable(data, seed)

    @given(st.binary(max_size=2000), st.binary(max_size=2000))
    def test_extend_property(self, a, b):
        """Splitting the input anywhere gives the same checksum."""
        assert crc32c(a + b) == crc32c(b, crc32c(a))

    def test_buffer_types(self):
        """Any contiguous buffer works: bytearray, memoryview, numpy."""
        np = pytest.importorskip("numpy")
        data = bytes(range(256)) * 10
        expected = crc32c(data)
        assert expected == crc32c(bytearray(data))
        assert expected == crc32c(memoryview(data))
        assert expected == crc32c(np.frombuffer(data, dtype=np.uint8))

    def test_rejects_non_buffers(self):
        """A str is not bytes: TypeError."""
        with pytest.raises(TypeError):
            crc32c("text")

    @pytest.mark.parametrize("env", ["PYLOG_CRC32C_NO_VPCLMUL", "PYLOG_CRC32C_NO_HW"])
    def test_other_paths(self, env):
        """The implementations not chosen on this CPU (the crc32 instruction when the
        folding path is used, and the table) agree with the oracle too."""
        code = (
            "import random, crc32c, pylog\n"
            "r = random.Random(7)\n"
            "for n in list(range(0, 1100)) + [4096, 16384, 24577, 65536 + 13, 1 << 20]:\n"
            "    for off in (0, 1, 5):\n"
            "        v = memoryview(r.randbytes(n + off))[off:]\n"
            "        seed = r.getrandbits(32)\n"
            "        assert pylog.crc32c(v, seed) == crc32c.crc32c(v, seed), (n, off)\n"
            "print(pylog.crc32c_implementation())\n")
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, env: "1"},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out not in ("avx512-vpclmulqdq", "avx2-vpclmulqdq")
        if env == "PYLOG_CRC32C_NO_HW":
            assert out == "table"
