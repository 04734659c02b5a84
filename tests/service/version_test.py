#!/usr/bin/env python3
"""`--version` on every binary: exit 0 and the same five fields, each checked
against its source (the project version and BS_ABI_VERSION).

    version_test.py SOURCE_DIR PROJECT_VERSION BINARY...
"""
import pathlib
import re
import subprocess
import sys
import unittest

SOURCE = pathlib.Path(sys.argv[1])
PROJECT_VERSION = sys.argv[2]
BINARIES = sys.argv[3:]


def abi_version():
    header = (SOURCE / "client/include/blockswap/blockswap.h").read_text()
    return re.search(r"^#define BS_ABI_VERSION (\d+)u$", header, re.M).group(1)


class VersionTest(unittest.TestCase):
    def test_every_binary_prints_its_build(self):
        self.assertTrue(BINARIES, "no binaries given")
        for binary in BINARIES:
            with self.subTest(binary=binary):
                run = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                     timeout=60)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                lines = run.stdout.splitlines()
                name = pathlib.Path(binary).name
                self.assertEqual(lines[0], f"{name} {PROJECT_VERSION}", run.stdout)
                self.assertRegex(lines[1], r"^git revision: ([0-9a-f]{7,}(-dirty)?|unknown)$")
                self.assertEqual(lines[2], f"C ABI version: {abi_version()}")
                self.assertRegex(lines[3], r"^CUDA toolkit \(headers\): (built without CUDA|\d+\.\d+.*)$")
                self.assertRegex(lines[4], r"^backends: host(, cuda)?$")
                # A build with CUDA says so on both lines; one without, on neither.
                self.assertEqual("without" in lines[3], "cuda" not in lines[4], run.stdout)
                self.assertEqual(len(lines), 5, run.stdout)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
