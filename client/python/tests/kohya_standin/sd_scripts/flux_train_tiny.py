"""A stand-in sd-scripts Flux LoRA trainer: the model's two ModelOffloaders
built directly, kohya's own LoRA network or a peft LoRA, sampling between
steps. Trains the resident model and the block-swapped one and saves both.

    flux_train_tiny.py --out OUT [--blocks_to_swap N] [--lora kohya|peft]
                       [--checkpointing off,on] [--sample] [--ddp] [--steps N]

OUT holds, per checkpointing mode, the resident run and the streamed one.
"""
import argparse
import json
import os
import subprocess

import torch
import torch.nn as nn
import torch.nn.functional as F

from library import flux_models
from networks import lora_flux

parser = argparse.ArgumentParser()
parser.add_argument("--blocks_to_swap", type=int, default=4)
parser.add_argument("--lora", choices=("kohya", "peft"), default="kohya")
parser.add_argument("--checkpointing", default="off")
parser.add_argument("--sample", action="store_true")
parser.add_argument("--ddp", action="store_true")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--out", required=True)
args = parser.parse_args()
device = torch.device("cpu")
rank = 0
if args.ddp:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    rank = dist.get_rank()


class Network(nn.Module):
    """What DDP wraps: the LoRA parameters only; the model stays outside the
    module tree (its frozen weights are not DDP's)."""

    def __init__(self, model, lora):
        super().__init__()
        self.lora = lora
        self.model = [model]

    def forward(self, *inputs):
        return self.model[0](*inputs)


def add_lora(model):
    if args.lora == "kohya":
        network = lora_flux.LoRANetwork(model)
        network.apply_to()
        return network
    from peft import LoraConfig, inject_adapter_in_model
    inject_adapter_in_model(LoraConfig(r=4, lora_alpha=4, target_modules=[
        "img_qkv", "txt_qkv", "img_proj", "txt_proj", "linear1", "linear2"]), model)
    torch.manual_seed(2)
    with torch.no_grad():  # peft starts lora_B at zero: make every gradient count
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    return nn.ModuleDict({"peft": nn.ModuleList(
        m for n, m in model.named_modules() if n.endswith(("lora_A", "lora_B")))})


def data(step):
    g = torch.Generator().manual_seed(100 * rank + step)
    return (torch.randn(2, 8, 4, generator=g), torch.randn(2, 4, 16, generator=g),
            torch.rand(2, generator=g), torch.randn(2, 8, 4, generator=g))


def run(blocks_to_swap, checkpointing):
    model = flux_models.Flux()
    model.requires_grad_(False)
    if blocks_to_swap:
        model.enable_block_swap(blocks_to_swap, device)
        model.move_to_device_except_swap_blocks(device)
    else:
        model.to(device)
    network = add_lora(model)
    parameters = [p for p in network.parameters() if p.requires_grad]
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    wrapper = Network(model, network)
    if args.ddp:
        wrapper = DistributedDataParallel(wrapper)
    model.prepare_block_swap_before_forward()
    losses, samples = [], []
    for step in range(args.steps):
        if args.sample and step == 1:
            model.switch_block_swap_for_inference()
            with torch.no_grad():
                samples.append(model(*data(50)[:3]))
            model.switch_block_swap_for_training()
        img, txt, t, target = data(step)
        loss = F.mse_loss(wrapper(img, txt, t), target)
        loss.backward()
        losses.append(loss.detach().clone())
        with torch.no_grad():
            for p in parameters:
                p -= 0.05 * p.grad
                p.grad = None
    result = {"losses": losses, "samples": samples,
              "lora": {n: p.detach().clone() for n, p in network.named_parameters()}}
    if blocks_to_swap:
        result["stats"] = [model.offloader_double.stats(), model.offloader_single.stats()]
        result["offloaders"] = [type(model.offloader_double).__name__,
                                type(model.offloader_single).__name__]
        if args.ddp:
            dist.barrier()  # every rank holds its models open while rank 0 looks
            if rank == 0:
                result["admin"] = {what: json.loads(subprocess.run(
                    [os.environ["BLOCKSWAPCTL"], "--json", what], check=True,
                    capture_output=True, text=True).stdout) for what in ("models", "status")}
            dist.barrier()
    return result


results = {}
for checkpointing in args.checkpointing.split(","):
    for mode in ("resident", "streamed"):
        results[checkpointing, mode] = run(args.blocks_to_swap if mode == "streamed" else 0,
                                           checkpointing == "on")
torch.save(results, args.out.replace("RANK", str(rank)))
if args.ddp:
    dist.destroy_process_group()
