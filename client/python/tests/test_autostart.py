"""The private daemon (docs/architecture.md, "The private daemon"): with no
daemon running and no socket configured, the ranks of a torchrun job start
one private blockswapd, share it, and it exits once idle; and the cases where
nothing may be started."""
import os
import re
import shutil
import socket as socketlib
import subprocess
import sys
import time
import uuid

import pytest
import torch

from conftest import BIN_DIR, assert_ranks_train_like_resident

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "trainer_child.py")
SYSTEM_SOCKET = "/run/blockswap/blockswapd.sock"
WORLD = 4
IDLE_EXIT_S = 2


def system_daemon_answers():
    probe = socketlib.socket(socketlib.AF_UNIX)
    try:
        probe.connect(SYSTEM_SOCKET)
        return True
    except OSError:
        return False
    finally:
        probe.close()


pytestmark = pytest.mark.skipif(system_daemon_answers(),
                                reason=f"a system blockswapd answers at {SYSTEM_SOCKET}")


def kill_private_daemons(path):
    """SIGKILLs any blockswapd serving the private directory `path`, removes it."""
    sock = os.path.join(path, "blockswapd.sock")
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f"--socket={sock}".encode() in f.read().split(b"\0"):
                    os.kill(int(entry), 9)
        except (OSError, ValueError):
            pass
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_dir():
    """A private daemon's directory of the test's own (not the user's real
    /dev/shm/blockswap-UID); whatever daemon started in it is killed after."""
    path = f"/dev/shm/blockswap-pytest-{uuid.uuid4().hex[:12]}"
    try:
        yield path
    finally:
        kill_private_daemons(path)


def unconfigured_env(private_dir, **extra):
    """No socket configured: what a trainer on a machine without the service has."""
    env = {k: v for k, v in os.environ.items() if k not in ("BLOCKSWAP_SOCKET",
                                                          "BLOCKSWAP_AUTOSTART")}
    env.update(BLOCKSWAP_AUTOSTART_DIR=private_dir, BLOCKSWAP_AUTOSTART_IDLE_EXIT=str(IDLE_EXIT_S),
               PYTHONPATH=os.path.join(HERE, ".."), OMP_NUM_THREADS="1", **extra)
    return env


def wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_torchrun_ranks_with_no_daemon_start_one_and_train_bitwise(private_dir, tmp_path):
    out = str(tmp_path / "rankRANK.pt")
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={WORLD}", CHILD, "torchrun", private_dir,
         os.path.join(BIN_DIR, "blockswapctl"), out],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, env=unconfigured_env(private_dir))
    assert job.returncode == 0, job.stderr[-6000:]

    # Exactly one daemon was started; every other rank said it joined it.
    started = re.findall(r"^blockswap: started a private blockswapd \(pid (\d+)\)", job.stderr, re.M)
    joined = re.findall(r"^blockswap: using the private blockswapd at (\S+)", job.stderr, re.M)
    assert len(started) == 1, job.stderr[-6000:]
    assert joined == [os.path.join(private_dir, "blockswapd.sock")] * (WORLD - 1), job.stderr
    with open(os.path.join(private_dir, "blockswapd.log")) as f:
        log = f.read()
    assert log.count("ready on ") == 1, log
    assert not os.path.exists(os.path.join(private_dir, "blockswapd.log.1")), "a second start"

    results = [torch.load(out.replace("RANK", str(rank))) for rank in range(WORLD)]
    assert_ranks_train_like_resident(results)

    admin, daemon = results[0]["admin"], results[0]["daemon"]
    assert daemon["pid"] == int(started[0])
    assert sorted(c["client_name"] for c in admin["clients"]["clients"]) == \
        [f"torchrun-rank-{rank}" for rank in range(WORLD)]
    models = admin["models"]["models"]
    assert len(models) == 1, models

    # Memory of the node while all four streamed (recorded; goal <= 1.2).
    processes = results[0]["processes"]
    streamed_bytes = int(models[0]["bytes"])
    ring_bytes = sum(p["ring_bytes"] for p in processes)
    total = sum(p["pss"] for p in processes) + daemon["pss"]
    above_baseline = sum(p["pss"] - p["baseline"] for p in processes) + daemon["pss"]
    masters = sum(p["masters_pss"] for p in processes) + daemon["masters_pss"]
    print(f"\nP-torchrun: {WORLD} ranks, streamed {streamed_bytes / 2**20:.1f} MiB, "
          f"rings {ring_bytes / 2**20:.1f} MiB\n"
          f"  (sum PSS of all processes - ring bytes) / streamed bytes = "
          f"{(total - ring_bytes) / streamed_bytes:.2f}  (goal <= 1.2; dominated at this size by "
          f"{WORLD} interpreters with torch)\n"
          f"  the same counting each rank above its PSS before the streamed run's model = "
          f"{(above_baseline - ring_bytes) / streamed_bytes:.2f}  (still counts each rank's "
          f"resident blocks, {WORLD} x 24 MiB, and the daemon's own memory)\n"
          f"  sum PSS of the masters' mappings / streamed bytes = {masters / streamed_bytes:.2f}")
    print("  per rank (PSS MiB, above its baseline):",
          [(p["pss"] >> 20, (p["pss"] - p["baseline"]) >> 20) for p in processes],
          f"blockswapd: {daemon['pss'] >> 20} MiB")
    # The streamed weights are on the node once, whoever maps them.
    assert masters / streamed_bytes <= 1.2

    # The job is over: the daemon exits after its idle timeout, masters stay.
    assert wait_gone(daemon["pid"], IDLE_EXIT_S + 20), "the private blockswapd did not exit"
    assert not os.path.exists(os.path.join(private_dir, "blockswapd.sock"))
    assert os.listdir(os.path.join(private_dir, "masters")), "the masters stay for the next run"


PROBE = """
import torch, torch.nn as nn, blockswap
blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16)) for _ in range(4)).requires_grad_(False)
# h2d_only: the streaming offloader, which attaches as it is created.
config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=False,
                                   h2d_only=True)
blockswap.create_offloader("probe", blocks, 4, 2, config).close()
print("attached")
"""


def test_a_daemon_binary_of_another_version_is_refused(private_dir, tmp_path):
    library = os.path.realpath(os.environ["BLOCKSWAP_LIBRARY"])
    shutil.copy(library, tmp_path / "libblockswap.so")
    fake = tmp_path / "blockswapd"
    fake.write_text("#!/bin/sh\necho 'blockswapd 9.9.9'\necho 'C ABI version: 99'\n")
    fake.chmod(0o700)
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path,
                           env=unconfigured_env(private_dir,
                                                BLOCKSWAP_LIBRARY=str(tmp_path / "libblockswap.so")))
    assert probe.returncode != 0
    assert f"{fake} is version '9.9.9' (C ABI version '99'), this client library is version " \
        in probe.stderr, probe.stderr
    assert not os.path.exists(os.path.join(private_dir, "blockswapd.sock"))


def test_autostart_zero_turns_it_off(private_dir, tmp_path):
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path,
                           env=unconfigured_env(private_dir, BLOCKSWAP_AUTOSTART="0"))
    assert probe.returncode != 0
    assert "BLOCKSWAP_AUTOSTART=0, so no private blockswapd is started" in probe.stderr
    assert not os.path.exists(private_dir)
