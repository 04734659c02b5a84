"""fp8 weights with per-Linear scales (kohya's --fp8_scaled) stream both and
train like resident; DataLoader workers forked beside streaming leave the
parent's session alone and get a clear error when they call into blockswap."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import blockswap
from conftest import BIN_DIR
from tiny_transformer import (TinyTransformer, batches, fp8_weights_and_scales, to_fp8,
                              train)

NUM_BLOCKS, SWAP = 6, 4


def config(daemon, **overrides):
    return blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                     socket=daemon.socket, h2d_only=True,
                                     gradient_checkpointing=True, **overrides)


def fp8_model():
    return to_fp8(TinyTransformer(NUM_BLOCKS))


def test_fp8_weights_and_scales_stream_and_train_like_resident(daemon):
    data = batches(2)
    expected = train(fp8_model(), data)
    model = fp8_model()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # each occurrence, whatever was shown before
        model.offloader = blockswap.create_offloader(
            "blocks", model.blocks, NUM_BLOCKS, SWAP,
            config(daemon, swap_tensor_selector=fp8_weights_and_scales))
        got = train(model, data)
    # Block 0's input requires no grad: torch's warning about its hook is ours, and quiet.
    assert not [w for w in seen if "Full backward hook is firing" in str(w.message)]
    assert all(torch.equal(a, b) for a, b in zip(got[0], expected[0]))
    for a, b in zip(got[1], expected[1]):
        assert all(torch.equal(a[n], b[n]) for n in b)
    offloader = model.offloader
    block = offloader.stream_idx[0]
    assert {job.name for job in offloader._jobs[block]} >= {"qkv.base.weight",
                                                            "qkv.base.scale_weight"}
    # Both the fp8 weight and its scale live in the daemon's master, not in the block.
    masters = offloader.master_address_ranges()
    fc1 = model.blocks[block].fc1
    assert fc1.weight.dtype == torch.float8_e4m3fn
    for tensor in (fc1.weight, fc1.scale_weight):
        assert any(s <= tensor.data_ptr() < e for s, e in masters) or any(
            s <= tensor.data_ptr() < e for s, e in offloader.slot_address_ranges())
    assert offloader.stats()["backward"]["loads"] > 0
    offloader.close()


class Batches(Dataset):
    """The training batches, from forked workers; `probe` runs in the worker."""

    def __init__(self, data, probe=None):
        self.data, self.probe = data, probe

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        seen = self.probe() if self.probe else ""
        return self.data[index][0], self.data[index][1], seen


def train_from(model, loader):
    data = [(x, target) for x, target, _ in loader]
    return train(model, data)


def probe_child(offloader):
    """In a worker: every use of the parent's offloader is refused, and
    closing it leaves the parent's session alone."""
    def probe():
        assert os.getpid() != parent
        messages = []
        for call in (offloader.prepare_block_devices_before_forward,
                     lambda: offloader.wait_for_block(offloader.stream_idx[0]),
                     offloader.stats,
                     lambda: blockswap.create_offloader("blocks", offloader._blocks, NUM_BLOCKS,
                                                        SWAP, offloader._config)):
            try:
                call()
                messages.append("no error")
            except blockswap.BlockSwapError as error:
                messages.append(str(error))
        offloader.close()
        return "\n".join(messages)
    parent = os.getpid()
    return probe


def test_forked_dataloader_workers_leave_the_session_alone(daemon):
    data = batches(4)
    expected = train(TinyTransformer(NUM_BLOCKS), data)
    model = TinyTransformer(NUM_BLOCKS)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, NUM_BLOCKS, SWAP,
                                                 config(daemon))
    first = train(model, data[:1])  # attached and streaming before the workers fork
    loader = DataLoader(Batches(data[1:], probe_child(model.offloader)), batch_size=None,
                        num_workers=2, multiprocessing_context="fork", timeout=60)
    rest, seen = [], []
    for x, target, message in loader:
        rest.append((x, target))
        seen.append(message)
    later = train(model, rest)
    losses = first[0] + later[0]
    grads = first[1] + later[1]
    assert all(torch.equal(a, b) for a, b in zip(losses, expected[0]))
    for a, b in zip(grads, expected[1]):
        assert all(torch.equal(a[n], b[n]) for n in b)
    for message in seen:
        lines = message.split("\n")
        assert len(lines) == 4 and all("which was forked from process" in line and
                                       "'spawn'" in line for line in lines), message
    assert "prepare_block_devices_before_forward in process" in seen[0]
    # The parent's one session is still there and working.
    clients = daemon.ctl("clients")["clients"]
    assert [c["pid"] for c in clients] == [os.getpid()]
    assert model.offloader.stats()["backward"]["loads"] > 0
    model.offloader.close()


def test_a_forked_child_that_drops_the_offloader_and_exits_normally(daemon):
    """Beyond DataLoader (whose workers leave by os._exit): a plain fork whose
    child collects the inherited offloader and exits through the
    interpreter's and the library's exit handlers; the parent trains on. A
    second child, with the Python guard off, gets the C ABI's own refusal and
    exits too (before the C ABI forgot inherited handles, it hung in
    DestroyRing)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_exit.py")
    out = subprocess.run([sys.executable, script, daemon.socket, BIN_DIR], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["child", "0", "c_abi_child", "0", "equal", "True", "clients",
                                  "1"], out.stdout


def test_a_worker_of_a_process_without_blockswap_loaded_is_not_refused():
    from blockswap import _fork
    assert not _fork.in_forked_child()
    _fork.check("a call in the parent")  # no error
    with pytest.raises(blockswap.BlockSwapError, match="forked from process 1 "):
        _fork._forked_from, saved = 1, _fork._forked_from
        try:
            _fork.check("a call")
        finally:
            _fork._forked_from = saved


def test_model_file_errors_say_it_once_and_hint_at_model_select(daemon, tmp_path):
    from test_file_model import file_offloader, meta_model, write_base
    path = str(tmp_path / "base.safetensors")
    write_base(path, TinyTransformer(NUM_BLOCKS))  # biases and norms too
    # Refused by the client library (no file) and by the daemon (no block):
    # the file is named, and "registering" said at most once.
    for where, overrides in ((str(tmp_path / "missing.safetensors"), {}),
                             (path, {"model_block_pattern": r"^nothing\.(\d+)\."})):
        offloader = file_offloader(meta_model(), daemon, where, SWAP, **overrides)
        with pytest.raises(blockswap.BlockSwapError) as error:
            offloader.prepare_block_devices_before_forward()
        message = str(error.value)
        assert message.startswith("BlockSwapConfig.model_file: ") and where in message and \
            message.count("registering") <= 1, message
        offloader.close()
    offloader = file_offloader(meta_model(), daemon, path, SWAP, model_select=None,
                               model_select_rank=0)
    with pytest.raises(ValueError, match=r"that the selector does not stream in the module; the "
                                         r"file's blocks hold every tensor.*model_select=r\"\\\.w"
                                         r"eight\$\", model_select_rank=2"):
        offloader.prepare_block_devices_before_forward()
    offloader.close()
