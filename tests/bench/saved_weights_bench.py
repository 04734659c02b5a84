"""Step time of LoRA training through streamed blocks without gradient
checkpointing (weights saved for backward come back from the ring) ÷ with
it (the reference's way: every block recomputed in backward), side by side
in one run on one blockswapd (host backend), steps interleaved so that the
machine's load falls on both alike.

    python tests/bench/saved_weights_bench.py [--dim 512] [--steps 12]

Needs a configuration A build (build/bin/blockswapd, build/lib/libblockswap.so;
BLOCKSWAP_BUILD_DIR overrides) and a Python with torch. Prints both medians
and `saved-weights step_ratio goal=report measured=R`."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BLOCKSWAP_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "client", "python", "tests"))
os.environ.setdefault("BLOCKSWAP_LIBRARY", os.path.join(BUILD, "lib", "libblockswap.so"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import blockswap  # noqa: E402
from tiny_transformer import TinyTransformer, batches  # noqa: E402


def step(model, x, target):
    model.offloader.prepare_block_devices_before_forward(model.blocks)
    started = time.perf_counter()
    loss = F.mse_loss(model(x), target)
    loss.backward()
    for _, p in model.lora_parameters():
        p.grad = None
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    scratch = tempfile.mkdtemp(prefix="blockswap-bench.")
    shm = f"/dev/shm/blockswap-bench-{os.getpid()}"
    socket = os.path.join(scratch, "blockswapd.sock")
    daemon = subprocess.Popen([os.path.join(BUILD, "bin", "blockswapd"), "--config=/dev/null",
                               "--backend=host", f"--socket={socket}", f"--shm-prefix={shm}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(socket) and time.monotonic() < deadline:
            time.sleep(0.1)
        models = {}
        for checkpointing in (True, False):
            model = TinyTransformer(6, dim=args.dim, reentrant=True)
            model.gradient_checkpointing = checkpointing
            model.offloader = blockswap.create_offloader(
                "blocks", model.blocks, 6, 4, blockswap.BlockSwapConfig(
                    device=torch.device("cpu"), supports_backward=True, socket=socket,
                    h2d_only=True, gradient_checkpointing=checkpointing))
            models[checkpointing] = model
        x, target = batches(1, dim=args.dim, tokens=64)[0]
        times = {True: [], False: []}
        for i in range(args.steps + 2):
            for checkpointing, model in models.items():
                elapsed = step(model, x, target)
                if i >= 2:  # the first steps upload and warm up
                    times[checkpointing].append(elapsed)
        with_ckpt, without = (statistics.median(times[c]) for c in (True, False))
        load = os.getloadavg()[0]
        print(f"dim {args.dim}, 6 blocks (4 streamed, ring 2), {args.steps} steps each, "
              f"load average {load:.1f}")
        print(f"median step: {without * 1000:.1f} ms without checkpointing, "
              f"{with_ckpt * 1000:.1f} ms with")
        print(f"saved-weights step_ratio goal=report measured={without / with_ckpt:.3f}")
        for model in models.values():
            model.offloader.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
