"""Training and inference through a real blockswapd (host backend) give the
same numbers as without the offloader, computing on weights in ring slots."""
import time

import torch

import blockswap
from tiny_transformer import TinyTransformer, batches, train

NUM_BLOCKS, SWAP, RING = 6, 4, 2


def offload(model, daemon, supports_backward=True, ring_size=RING, swap=SWAP):
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"),
                                       supports_backward=supports_backward, ring_size=ring_size,
                                       socket=daemon.socket, h2d_only=True,
                                       gradient_checkpointing=supports_backward)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, len(model.blocks), swap,
                                                 config)
    return model.offloader


def record_weight_addresses(model):
    """Per streamed Linear call: (block index, weight data_ptr)."""
    seen = []
    for i, block in enumerate(model.blocks):
        for module in block.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_pre_hook(
                    lambda m, args, i=i: seen.append((i, m.weight.data_ptr())))
    return seen


def in_ranges(address, ranges):
    return any(start <= address < end for start, end in ranges)


def test_lora_training_matches_and_computes_on_ring_slots(daemon):
    data = batches(3)
    reference = TinyTransformer(NUM_BLOCKS)
    expected_losses, expected_grads = train(reference, data)

    model = TinyTransformer(NUM_BLOCKS)
    offloader = offload(model, daemon)
    seen = record_weight_addresses(model)
    losses, grads = train(model, data)

    assert offloader.stream_idx == [0, 2, 3, 5]
    for step, (got, want) in enumerate(zip(losses, expected_losses)):
        assert torch.equal(got, want), f"step {step}: loss {got} != {want}"
    for step, (got, want) in enumerate(zip(grads, expected_grads)):
        assert got.keys() == want.keys()
        for name in want:
            assert torch.equal(got[name], want[name]), f"step {step}: gradient of {name} differs"

    slots = offloader.slot_address_ranges()
    assert len(slots) == RING
    streamed = [(i, ptr) for i, ptr in seen if offloader.is_stream[i]]
    resident = [(i, ptr) for i, ptr in seen if not offloader.is_stream[i]]
    # Forward and the checkpoint recompute in backward, every step.
    assert len(streamed) == 3 * 2 * 4 * 4  # steps, passes, blocks, Linears
    for i, ptr in streamed:
        start, end = slots[offloader.rank[i] % RING]
        assert start <= ptr < end, f"block {i} computed on {ptr:#x}, not in its slot"
    assert resident and not any(in_ranges(ptr, slots) for _, ptr in resident)

    stats = offloader.stats()
    assert stats["model_id"] and len(stats["model_id"]) == 64
    # The last step: 4 forward loads (2 in prepare, rebinds after the first
    # step's backward), 2 backward loads.
    assert stats["backward"]["loads"] == 2
    assert stats["forward"]["waits"] == 4 and stats["forward"]["self_heals"] == 0
    # Both waits are reported, each a time of its own (the host backend's
    # compute stream is the training thread, so neither can exceed the step).
    for direction in ("forward", "backward"):
        assert 0 <= stats[direction]["stall_seconds"] < 60
        assert 0 < stats[direction]["host_wait_seconds"] < 60
    offloader.close()
    # The blocks stay usable with private copies of their weights.
    x, _ = data[0]
    with torch.no_grad():
        model.offloader = None
        reference.offloader = None
        assert torch.allclose(model(x), reference(x))


def test_inference_wraps_around(daemon):
    x = batches(1)[0][0]
    reference = TinyTransformer(NUM_BLOCKS, lora=False)
    with torch.no_grad():
        expected = reference(x)

    model = TinyTransformer(NUM_BLOCKS, lora=False)
    offloader = offload(model, daemon, supports_backward=False)
    offloader.prepare_block_devices_before_forward(model.blocks)
    with torch.no_grad():
        for npass in range(3):
            assert torch.equal(model(x), expected)
            stats = offloader.stats()
            # Ranks 2 and 3, then the wrap-around preloads ranks 0 and 1 for
            # the next pass, which therefore never loads on demand (the first
            # pass also counts prepare's loads of ranks 0 and 1).
            assert stats["forward"]["loads"] == (6 if npass == 0 else 4)
            assert stats["forward"]["self_heals"] == 0
            assert stats["forward"]["waits"] == 4
    offloader.close()


def test_sampling_between_training_steps(daemon):
    """set_forward_only around an inference pass, as trainers sample
    mid-training; training then goes on with the same numbers."""
    data = batches(2)
    x_sample = batches(1, seed=5)[0][0]
    reference = TinyTransformer(NUM_BLOCKS)
    model = TinyTransformer(NUM_BLOCKS)
    offloader = offload(model, daemon)
    for net in (reference, model):
        losses = [train(net, data[:1])[0][0]]
        if net.offloader is not None:
            net.offloader.set_forward_only(True)
            net.offloader.prepare_block_devices_before_forward(net.blocks)
        with torch.no_grad():
            losses.append(net(x_sample).sum())
        if net.offloader is not None:
            net.offloader.set_forward_only(False)
        losses.append(train(net, data[1:])[0][0])
        net.results = losses
    assert all(torch.equal(a, b) for a, b in zip(reference.results, model.results))
    stats = offloader.stats()
    assert stats["forward"]["self_heals"] == 0
    offloader.close()


def test_copy_seconds_are_the_daemons_copy_time(daemon):
    """stats() reports the copy time the daemon measured, also on the host
    backend, where every load is filled before its wait (so the client alone
    never sees a copy take any time)."""
    model = TinyTransformer(NUM_BLOCKS, dim=256, lora=False)  # blocks of about 3 MiB
    offloader = offload(model, daemon, supports_backward=False)
    x = batches(1, dim=256)[0][0]
    offloader.prepare_block_devices_before_forward(model.blocks)
    copy_seconds, loads = 0.0, 0
    with torch.no_grad():
        start = time.monotonic()
        model(x)
        offloader.stats()  # the first pass ends here
        for _ in range(4):
            model(x)
            forward = offloader.stats()["forward"]
            copy_seconds += forward["copy_seconds"]
            loads += forward["loads"]
            assert forward["copy_seconds"] > 0
        wall = time.monotonic() - start
    # A copy counts in the pass whose waits first see it complete (the first
    # pass's last prefetches count in the second); each of these was issued
    # after the first pass began.
    assert copy_seconds <= wall
    # Roughly these loads' bytes at the copy rate the daemon measured on its
    # device over the whole run (this test's ring was its only one).
    (device,) = daemon.ctl("stats")["devices"]
    rate = int(device["bytes_copied"]) / device["copy_seconds"]  # uint64: a JSON string
    start, end = offloader.master_address_ranges()[0]
    expected = loads * (end - start) / rate
    assert expected / 3 < copy_seconds < 3 * expected, (copy_seconds, expected, wall)
    offloader.close()
