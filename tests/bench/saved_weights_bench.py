"""Step time of LoRA training through streamed blocks without gradient
checkpointing (weights saved for backward come back from the ring) ÷ with
it (the reference's way: every block recomputed in backward), side by side
in one run on one blockswapd (host backend), steps interleaved so that the
machine's load falls on both alike.

    python tests/bench/saved_weights_bench.py [--dim 512] [--tokens 64] [--steps 12]
                                              [--autocast] [--fp8]

--autocast runs both under bf16 autocast (each streamed weight's bf16 cast is
saved as a token), --fp8 makes the blocks' Linears fp8 weights with per-row
scales dequantized in forward (each dequantized weight saved as a token).
Also times the saved-tensor pack hook of the run without checkpointing, where
saved tensors are told apart from slot views, casts and dequantizations of
streamed weights (the latter computed and compared bit for bit).

Needs a configuration A build (build/bin/blockswapd, build/lib/libblockswap.so;
BLOCKSWAP_BUILD_DIR overrides) and a Python with torch. Prints both medians
and, in run-all.sh's summary form (KIND: fp32, fp8, bf16, fp8-bf16),
`P9 saved-weights-step-ratio-KIND goal=report measured=R PASS` and
`P9 saved-weights-pack-share-KIND goal=report measured=S PASS` (the pack
hook's share of the step without checkpointing)."""
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
from blockswap.saved_weights import SavedWeightHooks  # noqa: E402
from tiny_transformer import TinyTransformer, batches, to_fp8  # noqa: E402


class PackTimer:
    """Seconds spent in SavedWeightHooks' pack hook while `counting`."""

    def __init__(self):
        self.seconds, self.calls, self.counting = 0.0, 0, False
        pack = SavedWeightHooks._pack
        timer = self

        def timed(hooks, tensor):
            if not timer.counting:
                return pack(hooks, tensor)
            started = time.perf_counter()
            try:
                return pack(hooks, tensor)
            finally:
                timer.seconds += time.perf_counter() - started
                timer.calls += 1
        SavedWeightHooks._pack = timed


def step(model, x, target, autocast):
    model.offloader.prepare_block_devices_before_forward(model.blocks)
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = F.mse_loss(model(x).float(), target)
    loss.backward()
    for _, p in model.lora_parameters():
        p.grad = None
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--autocast", action="store_true")
    parser.add_argument("--fp8", action="store_true")
    args = parser.parse_args()
    pack_timer = PackTimer()
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
            if args.fp8:
                to_fp8(model)
            model.gradient_checkpointing = checkpointing
            model.offloader = blockswap.create_offloader(
                "blocks", model.blocks, 6, 4, blockswap.BlockSwapConfig(
                    device=torch.device("cpu"), supports_backward=True, socket=socket,
                    h2d_only=True, gradient_checkpointing=checkpointing))
            models[checkpointing] = model
        x, target = batches(1, dim=args.dim, tokens=args.tokens)[0]
        times = {True: [], False: []}
        for i in range(args.steps + 2):
            for checkpointing, model in models.items():
                pack_timer.counting = i >= 2 and not checkpointing
                elapsed = step(model, x, target, args.autocast)
                pack_timer.counting = False
                if i >= 2:  # the first steps upload and warm up
                    times[checkpointing].append(elapsed)
        with_ckpt, without = (statistics.median(times[c]) for c in (True, False))
        pack_share = pack_timer.seconds / sum(times[False])
        load = os.getloadavg()[0]
        kind = ", ".join(["fp8 weights, per-row scales"] * args.fp8 +
                         ["bf16 autocast"] * args.autocast) or "fp32"
        print(f"dim {args.dim}, {args.tokens} tokens, 6 blocks (4 streamed, ring 2), {kind}, "
              f"{args.steps} steps each, load average {load:.1f}")
        print(f"median step: {without * 1000:.1f} ms without checkpointing, "
              f"{with_ckpt * 1000:.1f} ms with")
        print(f"pack hook without checkpointing: {pack_timer.seconds / args.steps * 1000:.2f} "
              f"ms per step, {pack_timer.calls // args.steps} tensors saved in streaming "
              f"blocks")
        tag = "-".join(["fp8"] * args.fp8 + ["bf16"] * args.autocast) or "fp32"
        print(f"P9 saved-weights-step-ratio-{tag} goal=report "
              f"measured={without / with_ckpt:.3f} PASS")
        print(f"P9 saved-weights-pack-share-{tag} goal=report measured={pack_share:.4f} PASS")
        for model in models.values():
            model.offloader.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
