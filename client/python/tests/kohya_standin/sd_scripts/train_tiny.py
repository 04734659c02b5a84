"""A stand-in sd-scripts trainer: a full fine-tune with block swap (exchange)."""
import argparse

from library import tiny_model  # first, as a trainer's own modules would be
import torch
from library.custom_offloading_utils import (  # noqa: F401 (every reference name imports)
    BlockSwapConfig, LoRAStreamOffloader, ModelOffloader, Offloader,
    UnslothOffloadedGradientCheckpointer, create_cpu_offloading_wrapper, create_offloader,
    default_swap_tensor_selector, detach_variable, swap_weight_devices_cuda,
    swap_weight_devices_no_cuda, to_cpu, to_device, unsloth_checkpoint, weighs_to_device)
from tiny_transformer import TinyTransformer, batches, train

parser = argparse.ArgumentParser()
parser.add_argument("--blocks_to_swap", type=int, default=2)
parser.add_argument("--out", required=True)
args = parser.parse_args()

model = TinyTransformer(6, reentrant=True).fine_tune()
offloader = tiny_model.enable_block_swap(model, args.blocks_to_swap, torch.device("cpu"))
losses, _ = train(model, batches(3), parameters=model.all_parameters)
torch.save({"losses": losses, "state": model.state_dict(), "offloader": type(offloader).__name__,
            "stats": offloader.stats()}, args.out)
