"""Real trainers' models: a peft LoRA on a diffusers Flux transformer trains
through blockswap with the default selector and the model's own forward, with
and without gradient checkpointing, bit for bit like the resident model; its
inference too."""
import os
import subprocess
import sys

import pytest
import torch

import blockswap
import blockswap.diffusers
from blockswap import saved_weights
from conftest import reaped
from tiny_flux import DOUBLE, inputs, sd3_inputs, tiny_flux, tiny_sd3, train_steps

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flux_child.py")


def config(daemon, supports_backward=True, **overrides):
    fields = dict(device=torch.device("cpu"), supports_backward=supports_backward,
                  socket=daemon.socket, h2d_only=True, gradient_checkpointing=supports_backward,
                  ring_size=1)
    return blockswap.BlockSwapConfig(**{**fields, **overrides})


def assert_same(got, want):
    (losses, grads), (want_losses, want_grads) = got, want
    assert len(losses) == len(want_losses) == len(grads) == len(want_grads)
    for step, (a, b) in enumerate(zip(losses, want_losses)):
        assert torch.equal(a, b), f"step {step}: loss {a} != {b}"
    for step, (a, b) in enumerate(zip(grads, want_grads)):
        assert a.keys() == b.keys() and a
        for name in b:
            assert torch.equal(a[name], b[name]), f"step {step}: gradient of {name} differs"


def test_default_selector_streams_peft_base_layers_only(daemon):
    model = tiny_flux()
    offloader = blockswap.create_offloader("transformer_blocks", model.transformer_blocks,
                                           DOUBLE, 2, config(daemon))
    names = [job.name for job in offloader._jobs[offloader.stream_idx[0]]]
    assert "attn.to_q.base_layer.weight" in names and "ff.net.2.weight" in names
    assert not [n for n in names if "lora_" in n]
    offloader.close()


def test_peft_lora_on_flux_trains_like_resident(daemon):
    expected = train_steps(tiny_flux(), 2)
    model = tiny_flux()
    swap = blockswap.diffusers.attach(model, {"transformer_blocks": 2,
                                              "single_transformer_blocks": 3}, config(daemon))
    got = train_steps(model, 2)
    assert_same(got, expected)
    stats = swap.stats()
    assert len(stats["single_transformer_blocks"]["streaming_blocks"]) == 3
    assert stats["transformer_blocks"]["backward"]["loads"] > 0
    # Sampling between steps (grad off: forward-only), then training goes on.
    with torch.no_grad():
        sample = model(**inputs(seed=7)).sample
    swap.close()
    reference = tiny_flux()
    train_steps(reference, 2)
    with torch.no_grad():
        assert torch.equal(sample, reference(**inputs(seed=7)).sample)


# Flux's RMSNorm gets bf16 activations and its fp32 weight under autocast.
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
def test_peft_lora_on_flux_trains_without_checkpointing_like_resident(daemon):
    """Under bf16 autocast, without checkpointing: weights saved for
    backward, and their casts, come back from the ring (one slot per list,
    overwritten before every block) through diffusers' keyword calls, so
    autograd holds none of the streamed blocks' bytes."""
    def run(model):
        held = []

        def pack(tensor):
            held.append(tensor)
            return tensor
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16):
            result = train_steps(model, 2)
        return result, held

    def uncheckpointed():
        model = tiny_flux()
        model.disable_gradient_checkpointing()
        return model
    expected, resident_held = run(uncheckpointed())
    model = uncheckpointed()
    swap = blockswap.diffusers.attach(model, {"transformer_blocks": 2,
                                              "single_transformer_blocks": 3},
                                      config(daemon, gradient_checkpointing=False))
    assert not model.gradient_checkpointing
    got, held = run(model)
    assert_same(got, expected)
    offloaders = swap.offloaders.values()
    weights = [w for o in offloaders for b in o.stream_idx for w in o.streamed_tensors(b)]
    ranges = [r for o in offloaders for r in o.slot_address_ranges() +
              o.master_address_ranges()]

    def weight_held(tensors):
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in tensors if any(s <= t.untyped_storage().data_ptr() < e
                                            for s, e in ranges) or
                    any(saved_weights.recipe_of(t, w, None) is not None for w in weights)}
        return sum(storages.values())
    block_bytes = max(sum(w.numel() * w.element_size() for w in o.streamed_tensors(b))
                      for o in offloaders for b in o.stream_idx)
    held_bytes = weight_held(held)
    print(f"\nflux, bf16 autocast, no checkpointing: streamed weights and casts held for "
          f"backward: {held_bytes} bytes (largest block: {block_bytes} bytes)")
    assert held_bytes <= block_bytes
    for name, stats in swap.stats().items():
        assert stats["backward"]["loads"] > 0 and stats["backward"]["self_heals"] == 0, name
    swap.close()


def test_the_reference_default_streams_a_peft_model(daemon):
    """h2d_only=False (the reference's exchange): trainable adapters on a
    frozen base are no full fine-tune, so the blocks stream."""
    expected = train_steps(tiny_flux(), 1)
    model = tiny_flux()
    swap = blockswap.diffusers.attach(model, 1, config(daemon, h2d_only=False))
    assert_same(train_steps(model, 1), expected)
    assert all(s["mode"] == "stream" for s in swap.stats().values()), swap.stats()
    swap.close()


def test_flux_inference_equals_resident(daemon):
    with torch.no_grad():
        expected = tiny_flux(lora=False)(**inputs()).sample
    model = tiny_flux(lora=False)
    swap = blockswap.diffusers.attach(model, 2, config(daemon, supports_backward=False))
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(model(**inputs()).sample, expected)
    assert swap.stats()["single_transformer_blocks"]["forward"]["waits"] == 2
    swap.close()


def test_model_file_maps_peft_names_to_the_checkpoint(daemon, tmp_path):
    from safetensors.torch import save_file
    base = tiny_flux(lora=False)
    path = str(tmp_path / "flux.safetensors")
    save_file({f"transformer_blocks.{n}": t.contiguous() for n, t in
               base.transformer_blocks.state_dict().items()
               if n.endswith(".weight") and t.dim() == 2}, path)
    expected = train_steps(tiny_flux(), 1)
    model = tiny_flux()
    # A mapping callable replaces the default one: peft's names kept as they are miss.
    cfg = config(daemon, model_file=path, model_block_pattern=r"^transformer_blocks\.(\d+)\.",
                 model_select=r"\.weight$", model_select_rank=2,
                 model_tensor_name=lambda name: name)
    swap = blockswap.diffusers.attach(model, {"transformer_blocks": 2}, cfg,
                                      lists=["transformer_blocks"])
    with pytest.raises(ValueError, match=r"streams 'attn.to_q.base_layer.weight', which "
                                         r"the model's block does not have"):
        train_steps(model, 1)
    swap.close()
    model = tiny_flux()
    swap = blockswap.diffusers.attach(model, {"transformer_blocks": 2}, config(
        daemon, model_file=path, model_block_pattern=r"^transformer_blocks\.(\d+)\.",
        model_select=r"\.weight$", model_select_rank=2), lists=["transformer_blocks"])
    assert_same(train_steps(model, 1), expected)
    swap.close()


def test_sd3_inference_equals_resident(daemon):
    with torch.no_grad():
        expected = tiny_sd3()(**sd3_inputs()).sample
    model = tiny_sd3()
    assert blockswap.diffusers.block_lists(model) == ["transformer_blocks"]
    swap = blockswap.diffusers.attach(model, 2, config(daemon, supports_backward=False))
    with torch.no_grad():
        assert torch.equal(model(**sd3_inputs()).sample, expected)
    assert swap.stats()["transformer_blocks"]["forward"]["waits"] == 2
    swap.close()


def test_two_processes_serving_flux_share_one_copy(daemon, tmp_path):
    with torch.no_grad():
        expected = tiny_flux(lora=False)(**inputs()).sample
    outs = [str(tmp_path / f"out{k}.pt") for k in range(2)]
    children = [subprocess.Popen([sys.executable, CHILD, daemon.socket, out], text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE) for out in outs]
    with reaped(children):
        ready = [child.stdout.readline().split() for child in children]
        assert all(line[:1] == ["ready"] for line in ready), ready
        assert ready[0][1] == ready[1][1]
        ids = ready[0][1].split(",")
        assert len(set(ids)) == 2  # one model per block list
        models = daemon.ctl("models")["models"]
        assert sorted(m["model_id"] for m in models) == sorted(ids)
        assert all(m["open_sessions"] == 2 for m in models)
        for child in children:
            child.stdin.write("done\n")
            child.stdin.flush()
        assert [child.wait(timeout=60) for child in children] == [0, 0]
    for out in outs:
        assert torch.equal(torch.load(out), expected)
