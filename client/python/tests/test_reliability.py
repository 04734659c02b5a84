"""A trainer survives blockswapd being killed and restarted under it (the
scheduler re-attaches, reopens the model by id and re-creates its ring), and
without a restart fails with a message that says what happened."""
import time

import pytest
import torch

import blockswap
from tiny_transformer import TinyTransformer, batches, train

NUM_BLOCKS, SWAP, RING = 6, 4, 2


def offload(model, daemon, reconnect_timeout_s=30.0):
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                       ring_size=RING, socket=daemon.socket, h2d_only=True,
                                       gradient_checkpointing=True,
                                       reconnect_timeout_s=reconnect_timeout_s)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, len(model.blocks), SWAP,
                                                 config)
    return model.offloader


def kill_daemon_in_block(model, block, action):
    """Runs `action` once, when block `block`'s forward starts in the second
    step: in the middle of a pass, with loads outstanding."""
    calls = {"n": 0}

    def hook(module, args):
        calls["n"] += 1
        if calls["n"] == 2:
            action()

    model.blocks[block].register_forward_pre_hook(hook)


def test_training_rides_out_a_daemon_restart_mid_pass(daemon):
    data = batches(4)
    expected_losses, expected_grads = train(TinyTransformer(NUM_BLOCKS), data)

    model = TinyTransformer(NUM_BLOCKS)
    offloader = offload(model, daemon)
    model_id_before = None
    kill_daemon_in_block(model, 3, daemon.kill_and_restart)
    losses, grads = [], []
    for step in range(len(data)):
        step_losses, step_grads = train(model, data[step:step + 1])
        losses += step_losses
        grads += step_grads
        if step == 0:
            model_id_before = offloader.model_id
    for step, (got, want) in enumerate(zip(losses, expected_losses)):
        assert torch.equal(got, want), f"step {step}: loss {got} != {want}"
    for step, (got, want) in enumerate(zip(grads, expected_grads)):
        for name in want:
            assert torch.equal(got[name], want[name]), f"step {step}: gradient of {name} differs"
    # The restarted daemon adopted the sealed masters: one model, the same id,
    # and the trainer attached to it again.
    models = daemon.ctl("models")["models"]
    assert [m["model_id"] for m in models] == [model_id_before]
    assert len(daemon.ctl("clients")["clients"]) == 1
    offloader.close()


def test_without_a_restart_training_fails_after_the_reconnect_timeout(daemon):
    data = batches(3)
    model = TinyTransformer(NUM_BLOCKS)
    offload(model, daemon, reconnect_timeout_s=1.0)
    killed = {}

    def kill():
        daemon.process.kill()
        daemon.process.wait()
        killed["at"] = time.monotonic()

    kill_daemon_in_block(model, 3, kill)
    with pytest.raises(blockswap.BlockSwapError) as failure:
        train(model, data)
    elapsed = time.monotonic() - killed["at"]
    assert failure.value.code == 14, failure.value  # UNAVAILABLE
    assert "lost blockswapd" in str(failure.value)
    assert 0.9 <= elapsed <= 10, f"failed {elapsed:.2f} s after the daemon died"
