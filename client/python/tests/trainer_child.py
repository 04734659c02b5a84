"""A trainer process for the multi-process tests.

  trainer_child.py share SOCKET      trains two steps through blockswapd, prints
                                     "ready MODEL_ID LOADS", waits for a line on
                                     stdin, closes and exits
  trainer_child.py ddp SOCKET RANK WORLD INIT_FILE BLOCKSWAPCTL OUT [BLOCKS SWAP]
                                     one rank of a gloo DDP run: trains with and
                                     without the offloader and saves both, and
                                     rank 0 what Admin showed while all streamed;
                                     BLOCKS transformer blocks (default 6) of which
                                     this rank streams SWAP (default 4)
  trainer_child.py torchrun PRIVATE_DIR BLOCKSWAPCTL OUT
                                     the same as one rank started by torchrun
                                     (RANK, WORLD_SIZE, MASTER_* from it), with
                                     no socket configured; rank 0 also saves
                                     every process's memory while all stream
"""
import gc
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


def pss_bytes(pid):
    """Proportional set size of a process (/proc/PID/smaps_rollup)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def mapped_pss_bytes(pid, prefix):
    """PSS of a process's mappings of files under `prefix`."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5].startswith(prefix)
            elif inside and fields[0] == "Pss:":
                total += int(fields[1]) * 1024
    return total


def daemon_pid(socket):
    """The blockswapd serving `socket` (its command line names it)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if f"--socket={socket}".encode() in args:
            return int(entry)
    raise RuntimeError(f"no blockswapd serves {socket}")


def offloader_for(model, socket, name, swap=4):
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                       socket=socket, gradient_checkpointing=True, h2d_only=True,
                                       client_name=name)
    return blockswap.create_offloader("blocks", model.blocks, len(model.blocks), swap, config)


def share(socket):
    model = TinyTransformer(6, reentrant=True)
    model.offloader = offloader_for(model, socket, f"share-{os.getpid()}")
    train(model, batches(2))
    stats = model.offloader.stats()
    print("ready", model.offloader.model_id, stats["forward"]["loads"], flush=True)
    sys.stdin.readline()
    model.offloader.close()


def ddp(socket, rank, world, init_file, blockswapctl, out, blocks="6", swap="4"):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=int(rank),
                            world_size=int(world))
    data = batches(3, seed=1 + int(rank))
    results = {}
    for mode in ("plain", "blockswap"):
        model = TinyTransformer(int(blocks), reentrant=True)
        if mode == "blockswap":
            # As in the reference trainers: the offloader first, then the DDP wrapper.
            model.offloader = offloader_for(model, socket, f"ddp-rank-{rank}", int(swap))
        wrapper = DistributedDataParallel(model)
        losses, _ = train(model, data, wrapper=wrapper)
        results[mode] = {"losses": losses,
                         "lora": {n: p.detach().clone() for n, p in model.lora_parameters()}}
        if mode == "blockswap":
            results["stats"] = model.offloader.stats()
            dist.barrier()  # both ranks attached and streamed
            if int(rank) == 0:
                admin = {}
                for what in ("clients", "models", "status"):
                    admin[what] = json.loads(subprocess.run(
                        [blockswapctl, "--socket", socket, "--json", what], check=True,
                        capture_output=True, text=True).stdout)
                results["admin"] = admin
            dist.barrier()
            model.offloader.close()
    torch.save(results, out)
    dist.destroy_process_group()


TORCHRUN_DIM = 512  # 12 MiB of frozen weights per block (4 of 6 streamed)


def torchrun(private_dir, blockswapctl, out):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    data = batches(3, seed=1 + rank, dim=TORCHRUN_DIM)
    results = {}
    for mode in ("plain", "blockswap"):
        if mode == "blockswap":
            # The interpreter, torch, gloo and what the plain run left behind.
            baseline = pss_bytes(os.getpid())
        model = TinyTransformer(6, dim=TORCHRUN_DIM, reentrant=True)
        if mode == "blockswap":
            model.offloader = offloader_for(model, None, f"torchrun-rank-{rank}")
        wrapper = DistributedDataParallel(model)
        losses, _ = train(model, data, wrapper=wrapper)
        results[mode] = {"losses": losses,
                         "lora": {n: p.detach().clone() for n, p in model.lora_parameters()}}
        if mode == "blockswap":
            offloader = model.offloader
            results["stats"] = offloader.stats()
            dist.barrier()  # every rank attached and streamed
            socket = os.path.join(private_dir, "blockswapd.sock")
            masters = os.path.join(private_dir, "masters") + "/"
            mine = {"pid": os.getpid(), "pss": pss_bytes(os.getpid()), "baseline": baseline,
                    "masters_pss": mapped_pss_bytes(os.getpid(), masters),
                    "ring_bytes": offloader.B * offloader._slot_bytes}
            processes = [None] * world
            dist.all_gather_object(processes, mine)
            if rank == 0:
                pid = daemon_pid(socket)
                results["daemon"] = {"pid": pid, "pss": pss_bytes(pid),
                                     "masters_pss": mapped_pss_bytes(pid, masters)}
                results["processes"] = processes
                admin = {}
                for what in ("clients", "models"):
                    # No --socket: blockswapctl finds the running private daemon too.
                    admin[what] = json.loads(subprocess.run(
                        [blockswapctl, "--json", what], check=True,
                        capture_output=True, text=True).stdout)
                results["admin"] = admin
            dist.barrier()
            offloader.close()
        del wrapper, model
        gc.collect()  # the plain run's weights are gone before the streamed run is measured
    torch.save(results, out.replace("RANK", str(rank)))
    dist.destroy_process_group()


if __name__ == "__main__":
    {"share": share, "ddp": ddp, "torchrun": torchrun}[sys.argv[1]](*sys.argv[2:])
