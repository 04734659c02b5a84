"""The Python package on the GPU (run by tests/gpu/device-check.sh).

Trains the README's model (8 blocks of 2 Linears, 4 streamed through a ring of
2) for 3 steps with the offloader against a blockswapd on --socket, then the
same steps with every block resident, and compares losses and adapter
gradients; every streamed Linear must compute on weights inside its ring
slot. Then 3 inference passes with wrap-around must match the resident
outputs. Prints one line per result and exits non-zero on any mismatch.

    python3 tests/gpu/python_on_gpu.py --socket S [--device cuda|cpu]

(--device cpu against a host-backend daemon is the dry run.)
"""
import argparse
import sys

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import blockswap

DIM, BLOCKS, SWAP, STEPS = 256, 8, 4, 3


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


def build(device):
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block(DIM) for _ in range(BLOCKS)).requires_grad_(False)
    adapter = nn.Linear(DIM, DIM)
    inputs = [torch.randn(16, DIM) for _ in range(STEPS)]
    return blocks, adapter.to(device), [x.to(device) for x in inputs]


def train(device, socket, seen):
    blocks, adapter, inputs = build(device)
    offloader = None
    if socket is None:
        blocks.to(device)
    else:
        config = blockswap.BlockSwapConfig(device=device, supports_backward=True,
                                           gradient_checkpointing=True, socket=socket,
                                           h2d_only=True)
        offloader = blockswap.create_offloader("blocks", blocks, BLOCKS, SWAP, config)
        for i, block in enumerate(blocks):
            for linear in (block.fc1, block.fc2):
                linear.register_forward_pre_hook(
                    lambda m, args, i=i: seen.append((i, m.weight.data_ptr())))
    losses, grads = [], []
    for x in inputs:
        if offloader:
            offloader.prepare_block_devices_before_forward(blocks)
        h = adapter(x)
        for i, block in enumerate(blocks):
            if offloader:
                offloader.wait_for_block(i)
            h = checkpoint(block, h, use_reentrant=False)
            if offloader:
                offloader.submit_move_blocks_forward(blocks, i)
        loss = h.pow(2).mean()
        adapter.zero_grad()
        loss.backward()
        losses.append(loss.item())
        grads.append(adapter.weight.grad.detach().clone())
    slots = offloader.slot_address_ranges() if offloader else []
    is_stream = list(offloader.is_stream) if offloader else []
    rank = dict(offloader.rank) if offloader else {}
    if offloader:
        print("offloader stats:", offloader.stats())
        offloader.close()
    return losses, grads, slots, is_stream, rank


def infer(device, socket):
    blocks, adapter, inputs = build(device)
    if socket is None:
        blocks.to(device)
        offloader = None
    else:
        config = blockswap.BlockSwapConfig(device=device, supports_backward=False, socket=socket,
                                           h2d_only=True)
        offloader = blockswap.create_offloader("blocks", blocks, BLOCKS, SWAP, config)
    outputs = []
    with torch.no_grad():
        for x in inputs:
            if offloader:
                offloader.prepare_block_devices_before_forward(blocks)
            h = adapter(x)
            for i, block in enumerate(blocks):
                if offloader:
                    offloader.wait_for_block(i)
                h = block(h)
                if offloader:
                    offloader.submit_move_blocks_forward(blocks, i)
            outputs.append(h.clone())
    if offloader:
        offloader.close()
    return outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__} on {device}; blockswap from {blockswap.__file__}")
    failures = []

    seen = []
    losses, grads, slots, is_stream, rank = train(device, args.socket, seen)
    want_losses, want_grads, *_ = train(device, None, [])
    print("losses streamed:", losses)
    print("losses resident:", want_losses)
    for step, (got, want) in enumerate(zip(grads, want_grads)):
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            failures.append(f"step {step}: adapter gradient differs (max "
                            f"{(got - want).abs().max().item():.3g})")
    if any(abs(a - b) > 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, want_losses)):
        failures.append("losses differ")
    streamed = [(i, ptr) for i, ptr in seen if is_stream[i]]
    outside = [(i, ptr) for i, ptr in streamed
               if not slots[rank[i] % len(slots)][0] <= ptr < slots[rank[i] % len(slots)][1]]
    print(f"{len(streamed)} streamed Linear calls, {len(outside)} outside their ring slot")
    if not streamed or outside:
        failures.append(f"weights not in their ring slot: {outside[:3]}")

    outputs = infer(device, args.socket)
    want_outputs = infer(device, None)
    for step, (got, want) in enumerate(zip(outputs, want_outputs)):
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
            failures.append(f"inference pass {step} differs")
    print(f"inference: {len(outputs)} passes with wrap-around compared")

    for failure in failures:
        print("FAIL", failure)
    print("python-on-gpu:", "FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
