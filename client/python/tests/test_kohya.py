"""`python -m blockswap.kohya` runs trainers laid out like sd-scripts and
musubi-tuner (kohya_standin/) unmodified: their `custom_offloading_utils` is
blockswap's before they import it, and they train equal to resident."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import BIN_DIR, HERE, REPO
from tiny_transformer import TinyTransformer, batches, train

STANDIN = os.path.join(HERE, "kohya_standin")


def launch(daemon, tmp_path, cwd, *args, pythonpath=()):
    out = tmp_path / "result.pt"
    env = dict(os.environ, BLOCKSWAP_SOCKET=daemon.socket, PYTHONPATH=os.pathsep.join(
        [*pythonpath, HERE, os.path.join(REPO, "client", "python")]))
    run = subprocess.run([sys.executable, "-m", "blockswap.kohya", *args, "--out", str(out)],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return torch.load(out), run.stderr


def resident(full_fine_tune):
    model = TinyTransformer(6, reentrant=True)
    parameters = model.fine_tune().all_parameters if full_fine_tune else model.lora_parameters
    losses, _ = train(model, batches(3), parameters=parameters)
    return losses, model.state_dict()


def assert_equal(result, expected):
    losses, state = expected
    assert all(torch.equal(a, b) for a, b in zip(result["losses"], losses)), result["losses"]
    assert result["state"].keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(result["state"][name], value), name


def test_sd_scripts_full_fine_tune_exchanges(daemon, tmp_path):
    root = os.path.join(STANDIN, "sd_scripts")
    result, err = launch(daemon, tmp_path, root, "train_tiny.py", "--blocks_to_swap", "2")
    assert "library.custom_offloading_utils is blockswap.custom_offloading_utils" in err
    assert result["offloader"] == "ModelOffloader" and result["stats"]["mode"] == "exchange"
    assert result["stats"]["backward"]["swaps"] == 2 * 3
    assert_equal(result, resident(full_fine_tune=True))


def test_musubi_lora_with_checkpointing_streams(daemon, tmp_path):
    src = os.path.join(STANDIN, "musubi_tuner", "src")
    result, err = launch(daemon, tmp_path, src, "-m", "musubi_tuner.tiny_train_network",
                         "--blocks_to_swap", "2", "--gradient_checkpointing", pythonpath=[src])
    assert "musubi_tuner.modules.custom_offloading_utils is blockswap." in err
    assert result["stats"]["mode"] == "stream"
    # 2 + 2 ring slots + 1 for the slots' alignment padding: the device
    # holds 1 block and 2 slots where the exchange holds 4 blocks.
    assert result["stats"]["streaming_blocks"] == [0, 1, 3, 4, 5]
    assert "streaming 5 of 6 blocks through blockswapd (ring of 2) instead of exchanging 2" in err
    assert result["stats"]["backward"]["loads"] > 0
    assert 0 < result["device_bytes"] <= result["reference_device_bytes"]
    assert_equal(result, resident(full_fine_tune=False))


def test_musubi_full_fine_tune_through_create_offloader_exchanges(daemon, tmp_path):
    src = os.path.join(STANDIN, "musubi_tuner", "src")
    result, err = launch(daemon, tmp_path, src, "-m", "musubi_tuner.tiny_train_network",
                         "--blocks_to_swap", "2", "--full_fine_tune", pythonpath=[src])
    assert result["stats"]["mode"] == "exchange"
    assert err.count("because of trainable block weights (a full fine-tune)") == 1, err
    assert_equal(result, resident(full_fine_tune=True))


@pytest.mark.parametrize("root,module", [
    ("sd_scripts", "library.custom_offloading_utils"),
    ("musubi_tuner/src", "musubi_tuner.modules.custom_offloading_utils")])
def test_without_the_launcher_the_standins_refuse(root, module):
    """The stand-ins' own modules raise: the tests above pass only through the hook."""
    run = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                         text=True, timeout=60, cwd=os.path.join(STANDIN, root))
    assert run.returncode != 0
    assert f"{module} of the stand-in ran: blockswap.kohya did not replace it" in run.stderr


def test_install_refuses_a_module_imported_before(monkeypatch):
    import types

    from blockswap import kohya
    monkeypatch.setitem(sys.modules, "library.custom_offloading_utils",
                        types.ModuleType("library.custom_offloading_utils"))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    with pytest.raises(RuntimeError, match=r"library.custom_offloading_utils was imported "
                                           r"before the hook"):
        kohya.install()


def test_launcher_usage_errors(tmp_path, capsys):
    from blockswap import kohya
    assert kohya.main([str(tmp_path / "none.py")]) == 2
    assert "no script" in capsys.readouterr().err
    assert kohya.main([]) == 2 and kohya.main(["-m"]) == 2
    assert "usage: python -m blockswap.kohya" in capsys.readouterr().err


def assert_flux_equal(results, checkpointing):
    resident, streamed = results[checkpointing, "resident"], results[checkpointing, "streamed"]
    assert all(torch.equal(a, b) for a, b in zip(streamed["losses"], resident["losses"]))
    assert all(torch.equal(a, b) for a, b in zip(streamed["samples"], resident["samples"]))
    assert streamed["lora"].keys() == resident["lora"].keys()
    for name, value in resident["lora"].items():
        assert torch.equal(streamed["lora"][name], value), (checkpointing, name)
    assert streamed["offloaders"] == ["ModelOffloader", "ModelOffloader"]
    for stats in streamed["stats"]:  # the double blocks', the single blocks'
        assert stats["mode"] == "stream", stats
        assert stats["backward"]["loads"] > 0 and stats["backward"]["self_heals"] == 0


@pytest.mark.parametrize("lora", ["kohya", "peft"])
def test_sd_scripts_flux_model_offloaders_stream_with_and_without_checkpointing(
        daemon, tmp_path, lora):
    """sd-scripts' Flux layout: two ModelOffloaders built directly in the older
    signature, keyword-activation double blocks, LoRA patched into the Linears
    from outside (kohya) or wrapping them (peft), a sampling pass between
    steps: both lists stream, equal to the resident model bit for bit."""
    root = os.path.join(STANDIN, "sd_scripts")
    results, err = launch(daemon, tmp_path, root, "flux_train_tiny.py", "--lora", lora,
                          "--checkpointing", "off,on", "--sample")
    for checkpointing in ("off", "on"):
        assert_flux_equal(results, checkpointing)
    assert err.count("blockswap: blocks: frozen weights for training: streaming") == 1, err


def test_sd_scripts_flux_under_torchrun_shares_each_block_once(daemon, tmp_path):
    """Two DDP ranks (gloo, DDP over the LoRA) at once, without checkpointing:
    each trains like its resident run, and the daemon holds each of the two
    lists' streamed blocks once for both."""
    out = tmp_path / "rankRANK.pt"
    env = dict(os.environ, BLOCKSWAP_SOCKET=daemon.socket, PYTHONPATH=os.pathsep.join(
        [HERE, os.path.join(REPO, "client", "python")]),
        BLOCKSWAPCTL=os.path.join(BIN_DIR, "blockswapctl"))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node=2", "-m", "blockswap.kohya", "flux_train_tiny.py",
                          "--ddp", "--steps", "2", "--out", str(out)],
                         cwd=os.path.join(STANDIN, "sd_scripts"), env=env, capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    ranks = [torch.load(str(out).replace("RANK", str(rank))) for rank in range(2)]
    for result in ranks:
        assert_flux_equal(result, "off")
    assert not torch.equal(ranks[0]["off", "resident"]["losses"][0],
                           ranks[1]["off", "resident"]["losses"][0])  # their own data
    for name, value in ranks[0]["off", "streamed"]["lora"].items():
        assert torch.equal(ranks[1]["off", "streamed"]["lora"][name], value), name
    admin = ranks[0]["off", "streamed"]["admin"]
    models = admin["models"]["models"]
    streamed = [len(stats["streaming_blocks"]) for stats in ranks[0]["off", "streamed"]["stats"]]
    assert sorted(m["block_count"] for m in models) == sorted(streamed)
    assert all(m["open_sessions"] == 2 for m in models), models
    assert int(admin["status"]["master_blocks"]) == sum(streamed), admin["status"]
