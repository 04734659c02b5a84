"""The package as a trainer installs it, and the README example as written."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from test_autostart import kill_private_daemons, system_daemon_answers

BUNDLE = os.path.abspath(os.environ.get("BLOCKSWAP_PYTHON_BUNDLE",
                                        os.path.join(REPO, "build", "python")))

# Run in a fresh interpreter: loads the package, streams an inference pass
# through the daemon, and reports where the libraries came from.
PROBE = """
import json, torch, torch.nn as nn, blockswap
blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16)) for _ in range(4)).requires_grad_(False)
config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=False)
offloader = blockswap.create_offloader("probe", blocks, 4, 2, config)
offloader.prepare_block_devices_before_forward(blocks)
x = torch.ones(1, 16)
with torch.no_grad():
    for i, block in enumerate(blocks):
        offloader.wait_for_block(i)
        x = block(x)
        offloader.submit_move_blocks_forward(blocks, i)
maps = [line.split()[-1] for line in open("/proc/self/maps") if ".so" in line]
print(json.dumps({"library": blockswap.library_path(), "module": blockswap.__file__,
                  "maps": sorted(set(maps)), "loads": offloader.stats()["forward"]["loads"]}))
offloader.close()
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("BLOCKSWAP_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(extra)
    return env


def test_pip_installed_bundle_loads_its_own_libraries(daemon, tmp_path):
    if not os.path.exists(os.path.join(BUNDLE, "blockswap", "_lib", "libblockswap.so.1")):
        pytest.skip(f"no bundle at {BUNDLE} (cmake --build build --target blockswap_python_bundle)")
    pytest.importorskip("setuptools", reason="pip install --no-build-isolation needs setuptools")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                    "--no-deps", "--no-index", "--target", str(target), BUNDLE],
                   check=True, timeout=240, cwd=tmp_path)
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path,
                         env=clean_env(PYTHONPATH=str(target), BLOCKSWAP_SOCKET=daemon.socket))
    import json
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    lib_dir = str(target / "blockswap" / "_lib")
    assert probe["module"].startswith(str(target))
    assert probe["library"] == os.path.join(lib_dir, "libblockswap.so.1")
    assert probe["loads"] > 0
    # gRPC, protobuf and abseil came from the bundle ($ORIGIN), not the system.
    wanted = [m for m in probe["maps"] if re.search(r"/lib(grpc|protobuf|absl_)", m)]
    assert wanted, probe["maps"]
    assert all(m.startswith(lib_dir) for m in wanted), wanted

    # With no socket configured the bundle's own blockswapd is the private
    # daemon: `pip install` was the whole set-up.
    if system_daemon_answers():
        return
    private_dir = str(tmp_path / "private")
    started = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path,
                             env=clean_env(PYTHONPATH=str(target), BLOCKSWAP_AUTOSTART_DIR=private_dir,
                                           BLOCKSWAP_AUTOSTART_IDLE_EXIT="60"))
    try:
        assert started.returncode == 0, started.stderr
        assert "blockswap: started a private blockswapd (pid" in started.stderr, started.stderr
        assert json.loads(started.stdout.strip().splitlines()[-1])["loads"] > 0
        pid = int(re.search(r"started a private blockswapd \(pid (\d+)\)", started.stderr).group(1))
        assert os.path.realpath(f"/proc/{pid}/exe") == os.path.join(lib_dir, "blockswapd")
    finally:
        kill_private_daemons(private_dir)


def readme_example():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    section = readme.split("## Use from a PyTorch trainer", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_as_written(daemon, tmp_path):
    example = tmp_path / "example.py"
    example.write_text(readme_example())
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path,
                         env=dict(os.environ, BLOCKSWAP_SOCKET=daemon.socket,
                                  PYTHONPATH=os.path.join(REPO, "client", "python")))
    assert out.returncode == 0, out.stderr
    assert re.search(r"^step 2: loss \d", out.stdout, re.M), out.stdout


def test_blocking_calls_release_the_gil():
    """Through ctypes.CDLL (never PyDLL), every call into the library, the
    blocking waits included, runs without the GIL."""
    import ctypes

    from blockswap import _abi
    lib = _abi.library()
    assert type(lib) is ctypes.CDLL
    for name in ("bs_scheduler_wait_for_block", "bs_scheduler_after_backward",
                 "bs_scheduler_prepare", "bs_ring_destroy"):
        assert not getattr(lib, name)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name
