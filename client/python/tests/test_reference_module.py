"""blockswap.custom_offloading_utils has every public name of the reference's
module, each behaving as the reference's (the exchange offloader and the
routing have test_exchange.py)."""
import argparse

import pytest
import torch
import torch.nn as nn

import blockswap
from blockswap import custom_offloading_utils as cou
from tiny_transformer import TinyTransformer, batches, train

REFERENCE_NAMES = [
    "BlockSwapConfig", "LoRAStreamOffloader", "ModelOffloader", "Offloader",
    "UnslothOffloadedGradientCheckpointer", "create_cpu_offloading_wrapper", "create_offloader",
    "default_swap_tensor_selector", "detach_variable", "swap_weight_devices_cuda",
    "swap_weight_devices_no_cuda", "to_cpu", "to_device", "unsloth_checkpoint",
    "weighs_to_device"]


def test_every_reference_name_is_there():
    assert sorted(cou.__all__) == REFERENCE_NAMES
    for name in REFERENCE_NAMES:
        assert getattr(cou, name) is not None, name
    assert issubclass(blockswap.exchange.ExchangeOffloader, cou.Offloader)
    assert issubclass(cou.LoRAStreamOffloader, blockswap.StreamOffloader)


def test_nested_moves_keep_the_structure():
    x = torch.ones(2)
    nested = {"a": [x, (x, 3)], "b": "text"}
    for moved in (cou.to_cpu(nested), cou.to_device(nested, torch.device("cpu"))):
        assert moved.keys() == nested.keys() and moved["b"] == "text"
        assert isinstance(moved["a"], list) and isinstance(moved["a"][1], tuple)
        assert torch.equal(moved["a"][0], x) and moved["a"][1][1] == 3
    assert cou.to_device(5, torch.device("cpu")) == 5
    assert cou.to_device(x, torch.float64).dtype == torch.float64  # anything Tensor.to takes


def test_detach_variable_detaches_a_tuple_keeping_requires_grad():
    a = torch.ones(2, requires_grad=True) * 2
    b = torch.ones(2)
    da, db, other = cou.detach_variable((a, b, "x"))
    assert da.requires_grad and da.grad_fn is None and torch.equal(da, a)
    assert not db.requires_grad and other == "x"
    with pytest.raises(RuntimeError, match="Only tuple of tensors is supported"):
        cou.detach_variable([a])


def test_unsloth_checkpoint_gives_the_gradients_of_plain_autograd():
    torch.manual_seed(0)
    layer = nn.Linear(8, 8)
    x, scale = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)

    def block(h, s):
        return torch.tanh(layer(h)) * s

    plain = block(x, scale).pow(2).sum()
    plain.backward()
    expected = [t.grad.clone() for t in (x, scale, layer.weight)]
    for t in (x, scale, layer.weight):
        t.grad = None
    out = cou.unsloth_checkpoint(block, x, scale)
    assert out.grad_fn is not None and torch.equal(out.pow(2).sum(), plain)
    out.pow(2).sum().backward()
    for got, want in zip((x.grad, scale.grad, layer.weight.grad), expected):
        assert torch.allclose(got, want)


def test_cpu_offloading_wrapper_moves_inputs_in_and_outputs_out():
    seen = []

    def func(a, b):
        seen.append((a.dtype, b))
        return {"sum": a + 1}

    wrapped = cou.create_cpu_offloading_wrapper(func, torch.float64)
    out = wrapped(torch.ones(2), 7)
    assert seen == [(torch.float64, 7)]
    assert out["sum"].device.type == "cpu" and torch.equal(out["sum"], torch.full((2,), 2.0,
                                                                                  dtype=torch.float64))


def test_default_selector_streams_the_frozen_weight_of_every_linear():
    class QuantLinear(nn.Module):  # the reference matches the class name's ending
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(2, 2))

    block = nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2), QuantLinear())
    block.append(nn.Linear(2, 2))
    block[3].weight = None
    block.requires_grad_(False)
    assert cou.default_swap_tensor_selector(block) == [(block[0], "weight"), (block[2], "weight")]
    # Unlike the reference, a trained weight is left in the trainer, not refused.
    block[0].weight.requires_grad_(True)
    assert cou.default_swap_tensor_selector(block) == [(block[2], "weight")]


def test_from_args_takes_h2d_only_training_without_checkpointing():
    """The reference refuses --block_swap_h2d_only training without
    --gradient_checkpointing; blockswap streams it (test_saved_weights.py)."""
    config = cou.BlockSwapConfig.from_args(argparse.Namespace(), torch.device("cpu"), True)
    assert (config.h2d_only, config.ring_size, config.use_pinned_memory) == (False, 2, False)
    training = cou.BlockSwapConfig.from_args(argparse.Namespace(block_swap_h2d_only=True),
                                             torch.device("cpu"), True)
    assert training.h2d_only and not training.gradient_checkpointing
    inference = cou.BlockSwapConfig.from_args(argparse.Namespace(block_swap_h2d_only=True),
                                              torch.device("cpu"), False)
    assert inference.h2d_only
    with pytest.raises(ValueError, match="--block_swap_ring_size must be >= 1"):
        cou.BlockSwapConfig.from_args(argparse.Namespace(block_swap_ring_size=0),
                                      torch.device("cpu"), True)


def test_lora_stream_offloader_streams_the_blocks_asked_for(daemon, monkeypatch):
    monkeypatch.setenv("BLOCKSWAP_SOCKET", daemon.socket)
    data = batches(2)
    expected, _ = train(TinyTransformer(6, reentrant=True), data)
    model = TinyTransformer(6, reentrant=True)
    model.offloader = cou.LoRAStreamOffloader("blocks", model.blocks, 6, 4, True,
                                              torch.device("cpu"), ring_size=2)
    # The reference's placement: S blocks at the midpoints of N/S intervals.
    assert model.offloader.stream_idx == sorted({(2 * i + 1) * 6 // 8 for i in range(4)})
    losses, _ = train(model, data)
    assert all(torch.equal(a, b) for a, b in zip(losses, expected))
    model.offloader.close()

    # A full fine-tune has nothing frozen to stream (the reference refuses it too).
    trainable = TinyTransformer(6, lora=False).fine_tune()
    offloader = cou.LoRAStreamOffloader("blocks", trainable.blocks, 6, 4, True,
                                        torch.device("cpu"))
    with pytest.raises(ValueError, match="has no frozen tensor to stream"):
        offloader.prepare_block_devices_before_forward(trainable.blocks)
    offloader.close()
