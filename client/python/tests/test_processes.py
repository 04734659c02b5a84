"""Several trainer processes streaming through one blockswapd."""
import os
import subprocess
import sys

import torch

from blockswap.offloader import _place_blocks
from conftest import BIN_DIR, assert_ranks_train_like_resident, reaped

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trainer_child.py")


def spawn(*args, **kwargs):
    return subprocess.Popen([sys.executable, CHILD, *args], text=True, **kwargs)


def test_two_trainer_processes_share_one_model(daemon):
    children = [spawn("share", daemon.socket, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(2)]
    with reaped(children):
        ready = [child.stdout.readline().split() for child in children]
        assert all(line[:1] == ["ready"] for line in ready), ready
        model_ids = {line[1] for line in ready}
        assert len(model_ids) == 1
        assert all(int(line[2]) > 0 for line in ready)
        # While both are attached and hold the model open.
        models = daemon.ctl("models")["models"]
        assert [m["model_id"] for m in models] == list(model_ids)
        assert models[0]["open_sessions"] == 2
        clients = daemon.ctl("clients")["clients"]
        assert sorted(c["pid"] for c in clients) == sorted(child.pid for child in children)
        for child in children:
            child.stdin.write("done\n")
            child.stdin.flush()
        assert [child.wait(timeout=60) for child in children] == [0, 0]
    assert len(daemon.ctl("models")["models"]) == 1


def run_ddp(daemon, tmp_path, world, shape=()):
    """A gloo DDP job of `world` trainer_child.py ranks; `shape(rank)`: the
    extra BLOCKS SWAP arguments of each rank. The ranks' results."""
    outs = [str(tmp_path / f"rank{rank}.pt") for rank in range(world)]
    ranks = [spawn("ddp", daemon.socket, str(rank), str(world), str(tmp_path / "rendezvous"),
                   os.path.join(BIN_DIR, "blockswapctl"), outs[rank],
                   *(shape(rank) if shape else ())) for rank in range(world)]
    with reaped(ranks):
        assert [rank.wait(timeout=180) for rank in ranks] == [0] * world
    return [torch.load(out) for out in outs]


def test_ranks_streaming_different_subsets_hold_each_shared_block_once(daemon, tmp_path):
    # A per-GPU blocks_to_swap. Each rank uploads only the blocks it
    # streams (3, 4, 6, 8 of 12: with 2, the ring of two slots would hold both
    # and the backward load nothing), so the daemon has four models, and holds
    # each distinct block once: the union of the four sets (spread over the
    # model, so not simply the largest).
    swaps = [3, 4, 6, 8]
    results = run_ddp(daemon, tmp_path, len(swaps), lambda rank: ("12", str(swaps[rank])))
    assert_ranks_train_like_resident(results)
    admin = results[0]["admin"]
    models = admin["models"]["models"]
    assert sorted(m["block_count"] for m in models) == swaps
    # Every block of TinyTransformer has one layout, so each model's bytes are
    # its block count times one block's.
    # 64-bit integers are JSON strings (the proto's canonical mapping).
    block_bytes = int(models[0]["bytes"]) // models[0]["block_count"]
    union = set()
    for swap in swaps:
        union.update(_place_blocks(12, swap, 2)[0])
    assert int(admin["status"]["master_blocks"]) == len(union), (admin["status"], models)
    assert int(admin["status"]["pinned_bytes"]) == len(union) * block_bytes, \
        (admin["status"], models)
    assert sum(int(m["bytes"]) for m in models) > int(admin["status"]["pinned_bytes"])


def test_ddp_ranks_stream_through_one_daemon(daemon, tmp_path):
    world = 2
    results = run_ddp(daemon, tmp_path, world)
    assert_ranks_train_like_resident(results)
    # The ranks saw different data.
    assert not torch.equal(results[0]["plain"]["losses"][0], results[1]["plain"]["losses"][0])
    admin = results[0]["admin"]
    assert sorted(c["client_name"] for c in admin["clients"]["clients"]) == \
        ["ddp-rank-0", "ddp-rank-1"]
    assert len(admin["models"]["models"]) == 1
    assert results[0]["stats"]["model_id"] == results[1]["stats"]["model_id"]
