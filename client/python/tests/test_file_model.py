"""Streamed tensors that were never materialised (meta) bound to a model
blockswapd reads from a safetensors file, or opens by id: training gives the
numbers of the same weights materialised normally; a mismatching layout is
refused naming the block and the tensor."""
import json
import struct

import pytest
import torch
import torch.nn as nn

import blockswap
from test_training import NUM_BLOCKS, RING
from tiny_transformer import TinyTransformer, batches, train


def write_base(path, model):
    """The frozen tensors of `model.blocks` as a safetensors file (F32), named
    "blocks.<b>.<name in the block>": a base model as trainers keep it."""
    header, data, offset = {}, [], 0
    for b, block in enumerate(model.blocks):
        for name, tensor in block.named_parameters():
            if tensor.requires_grad:
                continue
            raw = tensor.detach().to(torch.float32).contiguous().numpy().tobytes()
            header[f"blocks.{b}.{name}"] = {"dtype": "F32", "shape": list(tensor.shape),
                                            "data_offsets": [offset, offset + len(raw)]}
            data.append(raw)
            offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))


def meta_model():
    """The same model with every Linear's weight a meta tensor (no memory)."""
    model = TinyTransformer(NUM_BLOCKS)
    for block in model.blocks:
        for module in block.modules():
            if isinstance(module, nn.Linear):
                module.weight = nn.Parameter(torch.empty_like(module.weight, device="meta"),
                                             requires_grad=False)
    return model


def file_offloader(model, daemon, path, swap, **overrides):
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                       ring_size=RING, socket=daemon.socket,
                                       gradient_checkpointing=True, model_file=path,
                                       model_select=r"\.weight$", model_select_rank=2)
    for key, value in overrides.items():
        setattr(config, key, value)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, len(model.blocks), swap,
                                                 config)
    return model.offloader


@pytest.mark.parametrize("swap", [4, NUM_BLOCKS])
def test_meta_weights_bound_to_a_file_train_like_the_whole_model(daemon, tmp_path, swap):
    data = batches(3)
    reference = TinyTransformer(NUM_BLOCKS)
    path = str(tmp_path / "base.safetensors")
    write_base(path, reference)
    expected_losses, expected_grads = train(reference, data)

    model = meta_model()
    assert model.blocks[0].proj.weight.is_meta
    offloader = file_offloader(model, daemon, path, swap)
    losses, grads = train(model, data)
    for step, (got, want) in enumerate(zip(losses, expected_losses)):
        assert torch.equal(got, want), f"step {step}: loss {got} != {want}"
    for step, (got, want) in enumerate(zip(grads, expected_grads)):
        for name in want:
            assert torch.equal(got[name], want[name]), f"step {step}: gradient of {name} differs"
    for block in model.blocks:  # masters, slots or (resident) device copies now
        assert not any(p.is_meta for p in block.parameters())
    assert offloader.stats()["forward"]["loads"] > 0

    # A second trainer opens the same model by its id.
    again = meta_model()
    second = file_offloader(again, daemon, None, swap, model_file=None,
                            model_id=offloader.model_id)
    assert torch.equal(torch.stack(train(again, data)[0]), torch.stack(expected_losses))
    assert second.model_id == offloader.model_id  # opened at the first prepare
    second.close()
    offloader.close()


def test_a_prepare_refused_for_its_layout_succeeds_once_the_layout_is_fixed(daemon, tmp_path):
    data = batches(2)
    reference = TinyTransformer(NUM_BLOCKS)
    path = str(tmp_path / "base.safetensors")
    write_base(path, reference)
    expected_losses, _ = train(reference, data)

    model = meta_model()
    model.blocks[2].fc1.weight = nn.Parameter(torch.empty(5, 32, device="meta"),
                                              requires_grad=False)
    offloader = file_offloader(model, daemon, path, 4)
    with pytest.raises(ValueError, match=r"blocks block 2: .* the module \[5,32\]"):
        offloader.prepare_block_devices_before_forward(model.blocks)
    model.blocks[2].fc1.weight = nn.Parameter(torch.empty(128, 32, device="meta"),
                                              requires_grad=False)
    losses, _ = train(model, data)
    assert torch.equal(torch.stack(losses), torch.stack(expected_losses))
    offloader.close()


def test_a_mismatching_layout_is_refused(daemon, tmp_path):
    path = str(tmp_path / "base.safetensors")
    write_base(path, TinyTransformer(NUM_BLOCKS))

    model = meta_model()
    model.blocks[2].fc1.weight = nn.Parameter(torch.empty(5, 32, device="meta"),
                                              requires_grad=False)
    offloader = file_offloader(model, daemon, path, 4)
    with pytest.raises(ValueError, match=r"blocks block 2: model [0-9a-f]{64} block 2 tensor "
                                         r"'fc1.weight': the model has shape \[128,32\], the "
                                         r"module \[5,32\]"):
        offloader.prepare_block_devices_before_forward(model.blocks)
    offloader.close()

    model = meta_model()
    offloader = file_offloader(model, daemon, path, 4, swap_tensor_selector=lambda block: [
        (block.proj, "weight"), (block.proj, "bias")])
    with pytest.raises(ValueError, match=r"the selector streams 'proj.bias', which the model's "
                                         r"block does not have"):
        offloader.prepare_block_devices_before_forward(model.blocks)
    offloader.close()

    # Meta tensors without a model to bind them to.
    model = meta_model()
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=False,
                                       socket=daemon.socket, h2d_only=True)
    offloader = blockswap.create_offloader("blocks", model.blocks, NUM_BLOCKS, 4, config)
    with pytest.raises(ValueError, match=r"is a meta tensor \(never materialised\): set "
                                         r"BlockSwapConfig.model_id or model_file"):
        offloader.prepare_block_devices_before_forward(model.blocks)
    offloader.close()
