"""Training through streamed blocks without gradient checkpointing: weights
saved for backward come back from the ring (blockswap/saved_weights.py), bit
for bit equal to the resident model."""
import pytest
import torch
import torch.nn as nn

import blockswap
from blockswap import saved_weights
from tiny_transformer import (FP8ScaledLinear, TinyTransformer, batches,
                              fp8_weights_and_scales, to_fp8, train)

N, SWAP = 6, 4


def uncheckpointed(**kwargs):
    model = TinyTransformer(N, **kwargs)
    model.gradient_checkpointing = False
    return model


def stream(model, daemon, ring_size=2, swap=SWAP):
    model.offloader = blockswap.LoRAStreamOffloader(
        "blocks", model.blocks, N, swap, True, torch.device("cpu"), ring_size=ring_size)
    return model.offloader


@pytest.fixture
def socket(daemon, monkeypatch):
    monkeypatch.setenv("BLOCKSWAP_SOCKET", daemon.socket)
    return daemon.socket


def assert_same(got, want):
    losses, grads = got
    want_losses, want_grads = want
    assert all(torch.equal(a, b) for a, b in zip(losses, want_losses)), (losses, want_losses)
    for step, (g, w) in enumerate(zip(grads, want_grads)):
        assert g.keys() == w.keys()
        for name in w:
            assert torch.equal(g[name], w[name]), f"step {step}: gradient of {name}"


def slot_or_master(offloader, tensor):
    address = tensor.untyped_storage().data_ptr()
    return any(start <= address < end for start, end in
               offloader.slot_address_ranges() + offloader.master_address_ranges())


def test_lora_stream_offloader_trains_without_checkpointing_like_resident(daemon, socket):
    data = batches(3)
    expected = train(uncheckpointed(), data)
    model = uncheckpointed()
    offloader = stream(model, daemon, ring_size=1)  # every block overwrites the one slot
    assert_same(train(model, data), expected)
    stats = offloader.stats()
    assert stats["backward"]["loads"] > 0 and stats["backward"]["self_heals"] == 0
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    offloader.close()


class KeywordBlock(nn.Module):
    """Takes its activation and a conditioning shared by every block (which
    needs no gradient) as keywords, as sd-scripts' Flux double blocks do."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.mod = nn.Linear(16, 16)
        self.lora = nn.Parameter(torch.randn(16, 16) * 0.1)

    def forward(self, x, vec):
        return x + torch.tanh(self.fc(x) * self.mod(vec) + x @ self.lora)


def keyword_model(seed=0):
    torch.manual_seed(seed)
    blocks = nn.ModuleList(KeywordBlock() for _ in range(N))
    for block in blocks:
        block.fc.requires_grad_(False)
        block.mod.requires_grad_(False)
    return blocks


def keyword_steps(blocks, offloader=None, steps=2):
    losses, grads = [], []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, vec = torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g)
        if offloader is not None:
            offloader.prepare_block_devices_before_forward(blocks)
        for i, block in enumerate(blocks):
            if offloader is not None:
                offloader.wait_for_block(i)
            x = block(x=x, vec=vec)
            if offloader is not None:
                offloader.submit_move_blocks_forward(blocks, i)
        loss = x.square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append({f"{i}": b.lora.grad.clone() for i, b in enumerate(blocks)})
        for block in blocks:
            block.lora.grad = None
    return losses, grads


def test_blocks_with_keyword_inputs_stream_and_run_their_backward_work_once(daemon, socket,
                                                                              monkeypatch):
    expected = keyword_steps(keyword_model())
    blocks = keyword_model()
    offloader = blockswap.LoRAStreamOffloader("kw", blocks, N, SWAP, True, torch.device("cpu"))
    fired = []
    after_backward = offloader._after_backward
    monkeypatch.setattr(offloader, "_after_backward", lambda i: (fired.append(i),
                                                                 after_backward(i)))
    assert_same(keyword_steps(blocks, offloader), expected)
    hooked = [i for i in range(N) if offloader.is_stream[i] or
              (i > 0 and offloader.is_stream[i - 1])]
    # Once per hooked block per step, in backward order, though `vec` goes
    # to every block and needs no gradient; not for block 0, none of whose
    # inputs needs one (nothing runs after its backward).
    assert fired == [i for i in reversed(hooked) if i > 0] * 2
    offloader.close()


def test_an_exception_in_a_blocks_forward_leaves_no_hooks_and_training_goes_on(daemon, socket):
    data = batches(2)
    expected = train(uncheckpointed(), data[1:])
    model = uncheckpointed()
    offloader = stream(model, daemon)
    streaming = offloader.stream_idx[1]
    broken = model.blocks[streaming].fc1.register_forward_hook(
        lambda *_: (_ for _ in ()).throw(RuntimeError("broken block")))
    with pytest.raises(RuntimeError, match="broken block"):
        train(model, data[:1])
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert offloader._in_block == []
    broken.remove()
    assert_same(train(model, data[1:]), expected)
    offloader.close()


def test_a_trainers_save_on_cpu_composes_with_the_saved_weights(daemon, socket):
    """Our hooks are innermost while a streaming block runs: what they do not
    keep as tokens still goes to the trainer's outer hooks."""
    data = batches(2)
    with torch.autograd.graph.save_on_cpu():
        expected = train(uncheckpointed(), data)
    model = uncheckpointed()
    offloader = stream(model, daemon)
    outer = []

    class Recording(torch.autograd.graph.save_on_cpu):
        def __init__(self):
            super().__init__()
            inner = self.pack_hook
            self.pack_hook = lambda tensor: (outer.append(tensor), inner(tensor))[1]
    with Recording():
        got = train(model, data)
    assert_same(got, expected)
    assert outer, "the outer hooks saw nothing"
    assert not any(slot_or_master(offloader, t) for t in outer)
    offloader.close()


def train_recording(model, data, autocast=False):
    """Steps of `train` (optionally under bf16 autocast) whose tensors
    autograd saves, as they reach the outermost saved-tensor hooks (ours,
    innermost, let through what they do not keep as tokens), are kept in
    `model.held` (the last step's)."""
    losses, grads = [], []
    for x, target in data:
        if model.offloader is not None:
            model.offloader.prepare_block_devices_before_forward(model.blocks)
        held = []

        def pack(tensor):
            held.append(tensor)
            return tensor
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = torch.nn.functional.mse_loss(model(x).float(), target)
        model.held = held
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.lora_parameters()})
        for _, p in model.lora_parameters():
            p.grad = None
    return losses, grads


def storage_bytes(tensors):
    """Bytes of the distinct storages under `tensors`."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in tensors}.values())


def test_bf16_autocast_saves_no_streamed_weight_nor_cast(daemon, socket):
    """Autocast's bf16 copies of the fp32 streamed weights would keep every
    block's weights until backward: they are saved as (block, tensor, dtype)
    and cast again at unpack. What autograd holds of streamed weights and
    their casts stays within one block's bytes (measured: nothing)."""
    data = batches(2)
    reference = uncheckpointed()
    expected = train_recording(reference, data, autocast=True)
    model = uncheckpointed()
    offloader = stream(model, daemon)
    assert_same(train_recording(model, data, autocast=True), expected)
    weights = [w for b in offloader.stream_idx for w in offloader.streamed_tensors(b)]
    block_bytes = sum(w.numel() * w.element_size() for w in offloader.streamed_tensors(
        offloader.stream_idx[0]))
    held = storage_bytes(t for t in model.held if slot_or_master(offloader, t) or any(
        saved_weights.recipe_of(t, w, None) is not None for w in weights))
    # The resident model's autograd holds its streamed-to-be blocks' casts.
    resident_casts = storage_bytes(t for t in reference.held if t.dtype == torch.bfloat16 and
                                   t.untyped_storage().nbytes() in
                                   {w.numel() * 2 for w in weights})
    print(f"\nbf16 autocast: streamed weights and casts held for backward: {held} bytes "
          f"(one block: {block_bytes} bytes; the resident run holds {resident_casts} bytes of "
          f"weight casts)")
    assert held <= block_bytes
    offloader.close()


FP8_CASES = {
    # The scale resident beside the streamed weight (the default selector,
    # as musubi-tuner's offloader moves weights only); fp32 forward.
    "row scales resident": dict(per_row=True, selector=None, autocast=False),
    # The scale streamed with the weight; under bf16 autocast the linear
    # saves a bf16 cast of the fp32 dequantization.
    "tensor scales streamed, bf16 autocast": dict(per_row=False, selector=fp8_weights_and_scales,
                                                  autocast=True),
}


@pytest.mark.parametrize("case", FP8_CASES)
def test_an_fp8_base_dequantized_in_forward_saves_no_dequantized_weight(daemon, socket, case):
    """Each streaming block's dequantized weights would stay on the device
    until backward: they are saved as (block, tensor, dtype, scale) and
    computed again from the slot at unpack. Gradients equal the resident
    model's; the bytes autograd holds of streamed weights, their casts and
    dequantizations stay within one block's (measured: nothing)."""
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    per_row, selector, autocast = (FP8_CASES[case][k] for k in ("per_row", "selector",
                                                                 "autocast"))
    data = batches(2)
    reference = to_fp8(uncheckpointed(), per_row)
    expected = train_recording(reference, data, autocast)
    model = to_fp8(uncheckpointed(), per_row)
    model.offloader = offloader = blockswap.LoRAStreamOffloader(
        "blocks", model.blocks, N, SWAP, True, torch.device("cpu"), ring_size=2,
        swap_tensor_selector=selector)
    assert_same(train_recording(model, data, autocast), expected)
    assert model.blocks[offloader.stream_idx[0]].fc1.weight.dtype == torch.float8_e4m3fn
    # What a forward makes of the streamed weights, computed here from the
    # resident model's equal ones, whatever blockswap recognises.
    derived = []
    for b in offloader.stream_idx:
        for module in reference.blocks[b].modules():
            if isinstance(module, FP8ScaledLinear):
                dequantized = module.dequantized()
                derived += [dequantized, dequantized.to(torch.bfloat16)]

    def weight_derived(t):  # autograd may save a view (the transposed weight)
        storage = t.untyped_storage()
        values = t.new_empty(0).set_(storage, 0, (storage.nbytes() // t.element_size(),))
        return slot_or_master(offloader, t) or any(
            values.dtype == d.dtype and torch.equal(values, d.reshape(-1)) for d in derived)
    block_bytes = sum(w.numel() * w.element_size() for w in offloader.streamed_tensors(
        offloader.stream_idx[0]))
    held = storage_bytes(t for t in model.held if weight_derived(t))
    resident = storage_bytes(t for t in reference.held if weight_derived(t))
    print(f"\nfp8 base ({case}): streamed weights, casts and dequantizations held for "
          f"backward: {held} bytes (one block: {block_bytes} bytes; the resident run holds "
          f"{resident} bytes of dequantized weights)")
    assert resident > block_bytes  # what there is to hold
    assert held <= block_bytes
    assert offloader.stats()["backward"]["self_heals"] == 0
    offloader.close()


def test_each_dequantization_form_is_recognised_and_rebuilt_bit_for_bit():
    """Per-tensor, per-row and block-wise scales (musubi-tuner's three), in
    the scale's dtype and cast again; a tensor that is no such product, or a
    product with another scale, is left alone."""
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    g = torch.Generator().manual_seed(0)
    module = nn.Module()
    module.weight = nn.Parameter(torch.randn(8, 16, generator=g).to(torch.float8_e4m3fn),
                                 requires_grad=False)
    weight = module.weight
    for scale in (torch.rand(1, generator=g), torch.rand(8, 1, generator=g),
                  torch.rand(8, 2, 1, generator=g), torch.rand(8, 1, generator=g).bfloat16()):
        module.register_buffer("scale_weight", scale)
        cast = weight.to(scale.dtype)
        product = (cast.view(8, 2, -1) * scale).view(8, 16) if scale.dim() == 3 else \
            cast * scale
        for saved in (product, product.t(), product.to(torch.float16)):
            recipe = saved_weights.recipe_of(saved, weight, module)
            assert recipe is not None, (scale.shape, saved.dtype)
            rebuilt = saved_weights.rebuild(weight, getattr(module, recipe[0]), recipe[1],
                                            saved.dtype).as_strided(
                saved.size(), saved.stride(), saved.storage_offset())
            assert torch.equal(rebuilt, saved)
        assert saved_weights.recipe_of(product + 1, weight, module) is None
        other = nn.Module()
        other.scale_weight = scale * 2
        assert saved_weights.recipe_of(product, weight, other) is None


def test_a_block_evicted_before_backward_is_loaded_again_and_counted(daemon, socket):
    """Out of the expected order (here: a prepare between forward and
    backward evicts the forward's last blocks), unpacking loads on demand."""
    x, target = batches(1)[0]
    reference = uncheckpointed()
    torch.nn.functional.mse_loss(reference(x), target).backward()
    model = uncheckpointed()
    offloader = stream(model, daemon)
    offloader.prepare_block_devices_before_forward(model.blocks)
    loss = torch.nn.functional.mse_loss(model(x), target)
    offloader.prepare_block_devices_before_forward(model.blocks)
    loss.backward()
    for (name, got), (_, want) in zip(model.lora_parameters(), reference.lora_parameters()):
        assert torch.equal(got.grad, want.grad), name
    assert offloader.stats()["backward"]["self_heals"] > 0
    offloader.close()


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_a_compiled_block_streams_like_resident(daemon, socket):
    data = batches(2)
    expected = train(uncheckpointed(), data)
    model = uncheckpointed()
    model.blocks[2].compile(backend="aot_eager")  # a streaming block
    offloader = stream(model, daemon)
    assert offloader.is_stream[2]
    assert_same(train(model, data), expected)
    offloader.close()


def test_without_checkpointing_streaming_holds_no_more_memory_than_resident(daemon, tmp_path):
    """Peak process memory over training steps (after set-up), the streamed
    run against the resident one, each in a process of its own; and no
    streamed weight held twice: neither the blocks nor autograd keep a copy
    of one besides the daemon's master and the ring slot."""
    import os
    import subprocess
    import sys

    from conftest import HERE
    results = {}
    for mode in ("resident", "streamed"):
        out = tmp_path / f"{mode}.pt"
        run = subprocess.run([sys.executable, os.path.join(HERE, "memory_child.py"), mode,
                              str(out)], env=dict(os.environ, BLOCKSWAP_SOCKET=daemon.socket),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        results[mode] = torch.load(out)
    resident, streamed = results["resident"], results["streamed"]
    print(f"\nmemory without checkpointing: peak over training {streamed['peak'] / 2**20:.1f} "
          f"MiB streamed, {resident['peak'] / 2**20:.1f} MiB resident; streamed weight bytes "
          f"held twice: {streamed['weights_outside']} in the blocks, "
          f"{streamed['saved_weight_bytes']} saved for backward")
    assert streamed["weights_outside"] == 0 and streamed["saved_weight_bytes"] == 0
    assert streamed["peak"] <= resident["peak"]
