"""Misuse fails early, with a message that says what to do."""
import pytest
import torch

import blockswap
from tiny_transformer import TinyTransformer, batches, train


def config(daemon, **overrides):
    fields = dict(device=torch.device("cpu"), supports_backward=True, socket=daemon.socket,
                  gradient_checkpointing=True, h2d_only=True)
    fields.update(overrides)
    return blockswap.BlockSwapConfig(**fields)


def create(model, cfg, swap=4):
    return blockswap.create_offloader("blocks", model.blocks, len(model.blocks), swap, cfg)


def every_linear_weight(block):
    return [(m, "weight") for m in block.modules() if isinstance(m, torch.nn.Linear)]


def test_trainable_streamed_weight_is_refused(daemon):
    model = TinyTransformer(6)
    model.blocks[2].proj.weight.requires_grad_(True)
    with pytest.raises(ValueError, match=r"returned proj\.weight of blocks block 2, which "
                                         r"requires grad.*Leave it out of the selector"):
        create(model, config(daemon, swap_tensor_selector=every_linear_weight))
    # The default selector leaves it in the trainer's process.
    offloader = create(model, config(daemon))
    assert "proj.weight" not in [job.name for job in offloader._jobs[2]]
    assert "qkv.base.weight" in [job.name for job in offloader._jobs[2]]
    offloader.close()


def test_a_full_fine_tune_streams_nothing_and_says_so(daemon):
    model = TinyTransformer(6, lora=False).fine_tune()
    model.gradient_checkpointing = True
    offloader = create(model, config(daemon))
    with pytest.raises(ValueError, match=r"blocks block 0 has no frozen tensor to stream: its "
                                         r"Linears qkv, proj, fc1, fc2 require grad"):
        offloader.prepare_block_devices_before_forward(model.blocks)
    offloader.close()


def test_a_selected_property_names_the_module_path(daemon):
    model = TinyTransformer(6)
    with pytest.raises(ValueError, match=r"returned 'weight' of qkv \(LoRALinear\) of blocks "
                                         r"block 0, which is neither a parameter"):
        create(model, config(daemon, swap_tensor_selector=lambda b: [(b.qkv, "weight")]))


def test_from_args_reads_the_trainer_flags(daemon):
    class Args:
        gradient_checkpointing = True
        block_swap_h2d_only = True
        block_swap_ring_size = 3
        blockswap_socket = daemon.socket

    cfg = blockswap.BlockSwapConfig.from_args(Args(), torch.device("cpu"), True)
    assert (cfg.ring_size, cfg.socket, cfg.gradient_checkpointing, cfg.h2d_only) == \
        (3, daemon.socket, True, True)
    offloader = create(TinyTransformer(6), cfg)
    assert offloader.B == 3
    offloader.close()


def test_unprepared_offloader_says_to_prepare(daemon):
    model = TinyTransformer(6)
    offloader = create(model, config(daemon))
    with pytest.raises(RuntimeError, match="prepare_block_devices_before_forward"):
        offloader.wait_for_block(0)
    offloader.close()


def test_device_the_daemon_cannot_drive_is_refused(daemon):
    with pytest.raises(ValueError, match=r"host backend.*cannot stream to cuda"):
        create(TinyTransformer(6), config(daemon, device=torch.device("cuda")))


def test_missing_daemon_names_the_socket(tmp_path):
    socket = str(tmp_path / "nobody.sock")
    with pytest.raises(blockswap.BlockSwapError, match=f"connecting to blockswapd at {socket}"):
        create(TinyTransformer(6), blockswap.BlockSwapConfig(
            device=torch.device("cpu"), supports_backward=False, socket=socket, h2d_only=True))


def test_a_slot_overwritten_under_saved_weights_fails_loudly(daemon):
    """Weights saved outside the saved-tensor hooks (a pass run under grad in
    forward-only mode, which installs none) are views of slots that later
    loads overwrite: each load bumps their version, so that backward refuses
    them instead of computing with another block's weights."""
    model = TinyTransformer(6)
    model.gradient_checkpointing = False
    model.offloader = create(model, config(daemon))
    model.offloader.set_forward_only(True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        train(model, batches(1))
    model.offloader.close()


def test_a_prepare_or_wait_under_cuda_graph_capture_is_refused_with_the_reason(daemon,
                                                                             monkeypatch):
    model = TinyTransformer(6)
    offloader = create(model, config(daemon))
    offloader.prepare_block_devices_before_forward(model.blocks)
    # As under torch.cuda.graph(): CUDA initialised, the current stream capturing.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for call in (lambda: offloader.prepare_block_devices_before_forward(model.blocks),
                 lambda: offloader.wait_for_block(offloader.stream_idx[0])):
        with pytest.raises(RuntimeError, match=r"during CUDA graph capture\. Streamed blocks are "
                                               r"loaded by blockswapd"):
            call()
    monkeypatch.undo()
    offloader.wait_for_block(offloader.stream_idx[0])  # outside the capture it streams again
    offloader.close()
