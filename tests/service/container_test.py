#!/usr/bin/env python3
"""The container image's files, without building an image (the build machines
have no container runtime or registry): deploy/docker/Dockerfile passes
hadolint, and deploy/docker/runtime-packages.sh, run on a staged install of
this build, names the Debian packages that every binary of the tree loads.

    container_test.py SOURCE_DIR BUILD_DIR HADOLINT
"""
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = BUILD = HADOLINT = None


def hadolint(path):
    # Every finding fails, info-level ones included.
    return subprocess.run([HADOLINT, "--no-color", "--failure-threshold", "info", path],
                          capture_output=True, text=True, timeout=60)


def dpkg_owner(path):
    out = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
    if out.returncode != 0:
        out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    return out.stdout.split(":", 1)[0] if out.returncode == 0 else None


def shared_library_paths():
    """soname -> path as the dynamic linker's cache has them for this machine's ABI."""
    abi = {"x86_64": "x86-64", "aarch64": "AArch64"}.get(platform.machine(), platform.machine())
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    paths = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if match and abi in match.group(2):
            paths.setdefault(match.group(1), match.group(3))
    return paths


class DockerfileTest(unittest.TestCase):
    def test_dockerfile_passes_hadolint(self):
        out = hadolint(os.path.join(SOURCE, "deploy", "docker", "Dockerfile"))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_hadolint_flags_a_dockerfile_with_a_finding(self):
        # The same invocation must be able to fail: an unpinned apt-get install
        # without --no-install-recommends, lists left behind.
        with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile") as f:
            f.write("FROM debian:12\nRUN apt-get update && apt-get install -y curl\n")
            f.flush()
            out = hadolint(f.name)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("DL3015", out.stdout)

    def test_build_script_refuses_unknown_options(self):
        out = subprocess.run(["bash", os.path.join(SOURCE, "deploy", "docker", "build.sh"),
                              "--no-such-option"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown option '--no-such-option'", out.stderr)


class RuntimePackagesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.stage = os.path.join(self.tmp, "stage")
        subprocess.run(["cmake", "--install", BUILD, "--prefix", "/usr"],
                       env=dict(os.environ, DESTDIR=self.stage, BLOCKSWAP_CONFIG_DIR="/etc/blockswap"),
                       check=True, capture_output=True, timeout=120)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_lists_the_packages_of_every_library_the_binaries_need(self):
        out = subprocess.run([os.path.join(SOURCE, "deploy", "docker", "runtime-packages.sh"),
                              self.stage], capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        packages = set(out.stdout.split())
        self.assertTrue(packages, "no packages listed")
        # Checked another way than the script does (readelf's NEEDED and the
        # linker cache, not ldd): the owner of every library a binary names.
        cache = shared_library_paths()
        own = {name for _, _, names in os.walk(self.stage) for name in names}
        for binary in ("blockswapd", "blockswapctl", "blockswap-demo"):
            path = os.path.join(self.stage, "usr", "bin", binary)
            dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                                     check=True).stdout
            for soname in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic):
                if soname in own:
                    continue  # the tree's own libblockswap
                self.assertIn(soname, cache, "%s needs %s, which the linker cache lacks"
                              % (binary, soname))
                owner = dpkg_owner(cache[soname])
                self.assertIn(owner, packages, "%s needs %s (package %s)" % (binary, soname, owner))

    def test_refuses_a_tree_without_programs(self):
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        out = subprocess.run([os.path.join(SOURCE, "deploy", "docker", "runtime-packages.sh"),
                              empty], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 1)
        self.assertIn("no dynamically linked program", out.stderr)


if __name__ == "__main__":
    SOURCE = os.path.abspath(sys.argv.pop(1))
    BUILD = os.path.abspath(sys.argv.pop(1))
    HADOLINT = sys.argv.pop(1)
    unittest.main(verbosity=2)
