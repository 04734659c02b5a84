"""A trainer process for the multi-process tests.

  trainer_child.py share SOCKET      trains two steps through blockswapd, prints
                                     "ready MODEL_ID LOADS", waits for a line on
                                     stdin, closes and exits
  trainer_child.py ddp SOCKET RANK WORLD INIT_FILE BLOCKSWAPCTL OUT
                                     one rank of a gloo DDP run: trains with and
                                     without the offloader and saves both, and
                                     rank 0 what Admin showed while both streamed
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import blockswap  # noqa: E402
from tiny_transformer import TinyTransformer, batches, train  # noqa: E402


def offloader_for(model, socket, name):
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                       socket=socket, gradient_checkpointing=True, h2d_only=True,
                                       client_name=name)
    return blockswap.create_offloader("blocks", model.blocks, len(model.blocks), 4, config)


def share(socket):
    model = TinyTransformer(6, reentrant=True)
    model.offloader = offloader_for(model, socket, f"share-{os.getpid()}")
    train(model, batches(2))
    stats = model.offloader.stats()
    print("ready", model.offloader.model_id, stats["forward"]["loads"], flush=True)
    sys.stdin.readline()
    model.offloader.close()


def ddp(socket, rank, world, init_file, blockswapctl, out):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=int(rank),
                            world_size=int(world))
    data = batches(3, seed=1 + int(rank))
    results = {}
    for mode in ("plain", "blockswap"):
        model = TinyTransformer(6, reentrant=True)
        if mode == "blockswap":
            # As in the reference trainers: the offloader first, then the DDP wrapper.
            model.offloader = offloader_for(model, socket, f"ddp-rank-{rank}")
        wrapper = DistributedDataParallel(model)
        losses, _ = train(model, data, wrapper=wrapper)
        results[mode] = {"losses": losses,
                         "lora": {n: p.detach().clone() for n, p in model.lora_parameters()}}
        if mode == "blockswap":
            results["stats"] = model.offloader.stats()
            dist.barrier()  # both ranks attached and streamed
            if int(rank) == 0:
                admin = {}
                for what in ("clients", "models"):
                    admin[what] = json.loads(subprocess.run(
                        [blockswapctl, "--socket", socket, "--json", what], check=True,
                        capture_output=True, text=True).stdout)
                results["admin"] = admin
            dist.barrier()
            model.offloader.close()
    torch.save(results, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    {"share": share, "ddp": ddp}[sys.argv[1]](*sys.argv[2:])
