"""A real blockswapd (host backend) per test, always stopped.

Finds blockswapd and blockswapctl in $BLOCKSWAP_BIN_DIR (default: build/bin of
this checkout) and the client library through $BLOCKSWAP_LIBRARY (the ctest
sets both; default build/lib/libblockswap.so).
"""
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "client", "python"))
# Absolute: the tests' child processes run in other directories.
os.environ["BLOCKSWAP_LIBRARY"] = os.path.abspath(
    os.environ.get("BLOCKSWAP_LIBRARY", os.path.join(REPO, "build", "lib", "libblockswap.so")))
BIN_DIR = os.path.abspath(os.environ.get("BLOCKSWAP_BIN_DIR", os.path.join(REPO, "build", "bin")))
# Every daemon and trainer of these tests aborts at a breach of CUDA's
# lifetime rules that the host backend sees (shared/backend/host_lifetime.h).
os.environ.setdefault("BLOCKSWAP_HOST_LIFETIME_CHECKS", "abort")
LIFETIME_BREACH = "CUDA lifetime rule broken"


class Daemon:
    def __init__(self, socket, process, log_path):
        self.socket = socket
        self.process = process
        self.log_path = log_path

    def ctl(self, *args):
        """`blockswapctl --json ARGS` as a dict."""
        out = subprocess.run([os.path.join(BIN_DIR, "blockswapctl"), "--socket", self.socket,
                              "--timeout", "5", "--json", *args],
                             check=True, capture_output=True, text=True, timeout=20)
        return json.loads(out.stdout)

    def log(self):
        with open(self.log_path) as f:
            return f.read()


def assert_ranks_train_like_resident(results):
    """The results of a DDP job's ranks (trainer_child.py's ddp mode, one dict per rank): each
    rank streamed (its backward loaded blocks) and trained bit for bit like its own resident
    run, and DDP kept every rank's adapters identical to the first's."""
    import torch  # the package's tests need it; conftest itself does not

    for rank, result in enumerate(results):
        plain, streamed = result["plain"], result["blockswap"]
        assert all(torch.equal(a, b) for a, b in zip(plain["losses"], streamed["losses"])), rank
        for name, value in plain["lora"].items():
            assert torch.equal(value, streamed["lora"][name]), f"rank {rank}: {name}"
        assert result["stats"]["backward"]["loads"] > 0
    for result in results[1:]:
        for name, value in results[0]["blockswap"]["lora"].items():
            assert torch.equal(value, result["blockswap"]["lora"][name]), name


@contextlib.contextmanager
def reaped(processes):
    """Yields `processes` (subprocess.Popen); when the block ends, however it ends (a failed
    assertion), kills and reaps those still running, so that no trainer outlives its test."""
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _die_with_parent():
    """In the daemon's child before exec: SIGTERM it if pytest itself is killed
    (a ctest timeout), when the fixture's `finally` cannot run."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _start(args, log_path):
    with open(log_path, "a") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)


def _await_health(running):
    deadline = time.monotonic() + 20
    while True:
        if running.process.poll() is not None:
            raise RuntimeError(f"blockswapd exited at start-up:\n{running.log()}")
        health = subprocess.run([os.path.join(BIN_DIR, "blockswapctl"), "--socket",
                                 running.socket, "--timeout", "2", "health"], capture_output=True)
        if health.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"blockswapd did not answer within 20 s:\n{running.log()}")
        time.sleep(0.1)


@pytest.fixture
def daemon():
    scratch = tempfile.mkdtemp(prefix="blockswap-pytest.")
    # Masters live on a tmpfs, in a directory of this test's own.
    shm = f"/dev/shm/blockswap-pytest-{uuid.uuid4().hex[:12]}"
    socket = os.path.join(scratch, "blockswapd.sock")
    log_path = os.path.join(scratch, "blockswapd.log")
    # --config=/dev/null: an installed service's config must not apply.
    args = [os.path.join(BIN_DIR, "blockswapd"), "--config=/dev/null", "--backend=host",
            f"--socket={socket}", f"--shm-prefix={shm}", "--shutdown-grace=2"]
    running = Daemon(socket, _start(args, log_path), log_path)

    def kill_and_restart():
        """SIGKILL the daemon and start a new one on the same socket and
        masters (which it adopts); returns once it answers."""
        running.process.kill()
        running.process.wait()
        running.process = _start(args, log_path)
        _await_health(running)

    running.kill_and_restart = kill_and_restart
    try:
        _await_health(running)
        yield running
    finally:
        process = running.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with open(log_path, errors="replace") as log:
            broken = [line for line in log if LIFETIME_BREACH in line]
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)
        assert not broken, f"blockswapd broke a CUDA lifetime rule: {broken}"
