"""The exchange offloader (the reference's ModelOffloader, in-process), and
which offloader `create_offloader` and `ModelOffloader` pick for the
reference's default (`h2d_only=False`): exchange for trainable weights,
blockswapd streaming for frozen blocks (checkpointed or not), with no more
device bytes than the exchange."""
import pytest
import torch
import torch.nn as nn

import blockswap
from blockswap.exchange import ExchangeOffloader
from device_bytes import device_bytes, reference_device_bytes
from tiny_transformer import TinyTransformer, batches, train

N, S = 6, 2


def exchange(model, swap=S, supports_backward=True):
    model.offloader = ExchangeOffloader(model.blocks, swap, torch.device("cpu"),
                                        supports_backward=supports_backward)
    return model.offloader


def record_moves(offloader):
    moves = []
    submit = offloader._submit_move_blocks

    def recording(blocks, out, into):
        moves.append((offloader._direction, out, into))
        submit(blocks, out, into)

    offloader._submit_move_blocks = recording
    return moves


def weight_addresses(block):
    return {m.weight.data_ptr() for m in block.modules() if getattr(m, "weight", None) is not None}


def test_full_fine_tune_exchanges_like_the_reference_and_equals_resident():
    data = batches(3)
    resident = TinyTransformer(N, lora=False).fine_tune()
    expected_losses, expected_grads = train(resident, data, parameters=resident.all_parameters)

    model = TinyTransformer(N, lora=False).fine_tune()
    offloader = exchange(model)
    moves = record_moves(offloader)
    # The reference's device layout: prepare leaves blocks 0..N-S-1 on the
    # device; every exchange moves a block into memory another one vacates, so
    # whatever runs, in forward or backward, computes on that same memory.
    on_device = set().union(*(weight_addresses(b) for b in model.blocks[:N - S]))
    computed = []

    def check(block_index):
        def hook(module, *args):
            computed.append(block_index)
            assert weight_addresses(module) <= on_device, f"block {block_index} is not on device"
        return hook

    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(check(i))
        block.register_full_backward_pre_hook(check(i))
    losses, grads = train(model, data, parameters=model.all_parameters)

    for step in range(3):
        assert torch.equal(losses[step], expected_losses[step]), f"step {step}"
        for name, grad in expected_grads[step].items():
            assert torch.equal(grads[step][name], grad), f"step {step}: gradient of {name}"
    for (name, got), (_, want) in zip(model.named_parameters(), resident.named_parameters()):
        assert torch.equal(got, want), name
    assert computed.count(0) == 2 * 3  # forward and backward, every step
    # Forward: blocks 0, 1 leave for N-S, N-S+1; backward brings them back in
    # reverse (the hooks of blocks 4 and 3): the reference's schedule.
    step = [("forward", 0, 4), ("forward", 1, 5), ("backward", 5, 1), ("backward", 4, 0)]
    assert moves == step * 3
    stats = offloader.stats()
    assert stats["mode"] == "exchange"
    assert stats["forward"]["swaps"] == stats["forward"]["waits"] == 2 * 3
    assert stats["backward"]["swaps"] == stats["backward"]["waits"] == 2 * 3


def test_forward_only_cycles_every_block_and_set_forward_only_switches():
    x = batches(1)[0][0]
    reference = TinyTransformer(N, lora=False)
    with torch.no_grad():
        expected = reference(x)
    model = TinyTransformer(N, lora=False)
    offloader = exchange(model)
    moves = record_moves(offloader)
    offloader.set_forward_only(True)
    offloader.prepare_block_devices_before_forward(model.blocks)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(model(x), expected)
    # Inference: every block leaves after it ran for the one N-S ahead.
    assert moves == [("forward", i, (N - S + i) % N) for i in range(N)] * 2
    offloader.set_forward_only(False)
    moves.clear()
    offloader.prepare_block_devices_before_forward(model.blocks)
    with torch.no_grad():
        assert torch.equal(model(x), expected)
    assert moves == [("forward", 0, 4), ("forward", 1, 5)]


@pytest.mark.parametrize("args,kwargs", [
    ((N, S, "cpu"), {}), ((N, S), {"device": "cpu"}),
    ((), {"num_blocks": N, "blocks_to_swap": S, "device": "cpu", "debug": False}),
    ((S, "cpu"), {"supports_backward": False}), ((S, "cpu", False), {}),
    ((), {"blocks_to_swap": S, "device": "cpu", "supports_backward": False})])
def test_model_offloader_takes_both_signatures_the_trainers_call(args, kwargs):
    offloader = blockswap.ModelOffloader(TinyTransformer(N).blocks, *args, **kwargs)
    older = len(args) >= 2 and args[0] == N or "num_blocks" in kwargs
    assert (offloader.num_blocks, offloader.blocks_to_swap, offloader.supports_backward,
            offloader.device) == (N, S, older, torch.device("cpu"))
    assert offloader.chosen is None  # until the first prepare


def test_model_offloader_refuses_arguments_precisely():
    blocks = TinyTransformer(N).blocks
    with pytest.raises(ValueError, match=r"num_blocks, blocks_to_swap, device, debug\): "
                                         r"num_blocks is 5 but 6 blocks"):
        blockswap.ModelOffloader(blocks, 5, S, "cpu")
    with pytest.raises(TypeError, match="unexpected keyword argument 'swap'"):
        blockswap.ModelOffloader(blocks, swap=S, device="cpu")
    with pytest.raises(TypeError, match="missing the argument 'device'"):
        blockswap.ModelOffloader(blocks, S)


def test_swap_helpers_exchange_weights_by_module_name():
    from blockswap.custom_offloading_utils import swap_weight_devices_no_cuda, weighs_to_device
    torch.manual_seed(0)
    a, b = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), nn.Sequential(nn.Linear(4, 4),
                                                                          nn.LayerNorm(4))
    a_weights = [m.weight.detach().clone() for m in a]
    b_weights = [m.weight.detach().clone() for m in b]
    a_memory = [m.weight.data_ptr() for m in a]
    a_params = [m.weight for m in a]
    swap_weight_devices_no_cuda(torch.device("cpu"), a, b)
    # b's weights now live in the memory a's left; a's have copies of their own.
    assert [m.weight.data_ptr() for m in b] == a_memory
    assert all(m.weight.data_ptr() not in a_memory for m in a)
    assert all(torch.equal(m.weight, w) for m, w in zip(a, a_weights))
    assert all(torch.equal(m.weight, w) for m, w in zip(b, b_weights))
    assert [m.weight for m in a] == a_params  # the same Parameter objects
    with pytest.raises(TypeError, match="different classes"):
        swap_weight_devices_no_cuda(torch.device("cpu"), a, nn.Linear(4, 4))
    weighs_to_device(a, torch.device("cpu"))
    assert all(torch.equal(m.weight, w) for m, w in zip(a, a_weights))


def config(daemon, **fields):
    return blockswap.BlockSwapConfig(**{"device": torch.device("cpu"), "supports_backward": True,
                                        "socket": daemon.socket, **fields})


def test_trainable_blocks_get_the_exchange_said_once(daemon, capfd):
    from blockswap import routing
    routing._said.clear()
    trainable = TinyTransformer(N, lora=False).fine_tune()
    for _ in range(2):
        offloader = blockswap.create_offloader("blocks", trainable.blocks, N, S,
                                               config(daemon, gradient_checkpointing=True))
        assert offloader.chosen is None  # until the first prepare
        offloader.prepare_block_devices_before_forward(trainable.blocks)
        assert type(offloader.chosen) is ExchangeOffloader
    err = capfd.readouterr().err
    assert err.count("trainable block weights (a full fine-tune)") == 1, err
    assert "exchanging 2 of 6 blocks" in err


def test_frozen_blocks_without_checkpointing_stream_equal_to_resident(daemon, capfd):
    from blockswap import routing
    routing._said.clear()
    data = batches(2)
    reference = TinyTransformer(N)
    reference.gradient_checkpointing = False
    expected, _ = train(reference, data)
    model = TinyTransformer(N)
    model.gradient_checkpointing = False
    model.offloader = blockswap.create_offloader("blocks", model.blocks, N, S,
                                                 config(daemon, gradient_checkpointing=False))
    losses, _ = train(model, data)
    assert isinstance(model.offloader.chosen, blockswap.StreamOffloader)
    assert all(torch.equal(a, b) for a, b in zip(losses, expected))
    assert "frozen weights for training: streaming 5 of 6 blocks" in capfd.readouterr().err
    model.offloader.close()


class Aligned(nn.Module):
    """A block whose weights are multiples of the daemon's 256-byte alignment."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(64, 64, bias=False), nn.Linear(64, 64)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("blocks,swap,ring,streamed", [
    ("tiny", 1, 2, 4), ("tiny", 2, 2, 5), ("tiny", 3, 1, 5), ("aligned", 3, 2, 5),
    ("aligned", 1, 3, 4), ("aligned", 6, 2, 8)])
def test_frozen_checkpointed_blocks_stream_in_no_more_device_memory(daemon, capfd, blocks, swap,
                                                                      ring, streamed):
    """S + B streaming blocks (one more where LayerNorm weights of 128 bytes
    pad each slot), at most N; the device never holds more than the exchange."""
    from blockswap import routing
    routing._said.clear()
    blocks = TinyTransformer(N).blocks if blocks == "tiny" else \
        nn.ModuleList(Aligned() for _ in range(8)).requires_grad_(False)
    offloader = blockswap.create_offloader(
        "blocks", blocks, len(blocks), swap,
        config(daemon, gradient_checkpointing=True, ring_size=ring))
    offloader.prepare_block_devices_before_forward(blocks)
    assert isinstance(offloader.chosen, blockswap.StreamOffloader)
    assert offloader.S == streamed
    assert device_bytes(offloader, blocks) <= reference_device_bytes(blocks, swap)
    assert f"streaming {streamed} of {len(blocks)} blocks" in capfd.readouterr().err
    offloader.close()


def test_streaming_that_cannot_fit_exchanges(daemon, capfd):
    model = TinyTransformer(4)  # all 4 streamed through 2 padded slots > 2 exchanged blocks
    offloader = blockswap.create_offloader("blocks", model.blocks, 4, 2,
                                           config(daemon, gradient_checkpointing=True))
    offloader.prepare_block_devices_before_forward(model.blocks)
    assert type(offloader.chosen) is ExchangeOffloader
    assert "streaming even all 4 blocks" in capfd.readouterr().err


def test_blocks_frozen_after_the_offloader_is_built_stream_equal_to_resident(daemon):
    """As trainers do: the offloader first, then the base frozen (adapters added)."""
    data = batches(2)
    expected, _ = train(TinyTransformer(N, reentrant=True), data)
    model = TinyTransformer(N, reentrant=True)
    model.requires_grad_(True)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, N, S,
                                                 config(daemon, gradient_checkpointing=True))
    model.requires_grad_(False)
    for _, parameter in model.lora_parameters():
        parameter.requires_grad_(True)
    losses, _ = train(model, data)
    assert isinstance(model.offloader.chosen, blockswap.StreamOffloader)
    assert model.offloader.S == 5 and model.offloader.stats()["mode"] == "stream"
    assert all(torch.equal(a, b) for a, b in zip(losses, expected))
    model.offloader.close()
