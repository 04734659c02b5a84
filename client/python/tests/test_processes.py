"""Several trainer processes streaming through one blockswapd."""
import os
import subprocess
import sys

import torch

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


def test_ddp_ranks_stream_through_one_daemon(daemon, tmp_path):
    world = 2
    outs = [str(tmp_path / f"rank{rank}.pt") for rank in range(world)]
    ranks = [spawn("ddp", daemon.socket, str(rank), str(world), str(tmp_path / "rendezvous"),
                   os.path.join(BIN_DIR, "blockswapctl"), outs[rank]) for rank in range(world)]
    with reaped(ranks):
        assert [rank.wait(timeout=120) for rank in ranks] == [0] * world
    results = [torch.load(out) for out in outs]
    assert_ranks_train_like_resident(results)
    # The ranks saw different data.
    assert not torch.equal(results[0]["plain"]["losses"][0], results[1]["plain"]["losses"][0])
    admin = results[0]["admin"]
    assert sorted(c["client_name"] for c in admin["clients"]["clients"]) == \
        ["ddp-rank-0", "ddp-rank-1"]
    assert len(admin["models"]["models"]) == 1
    assert results[0]["stats"]["model_id"] == results[1]["stats"]["model_id"]
