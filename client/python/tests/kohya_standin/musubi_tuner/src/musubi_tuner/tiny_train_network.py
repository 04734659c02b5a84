"""A stand-in musubi-tuner trainer: BlockSwapConfig.from_args and create_offloader,
LoRA on a frozen base (--gradient_checkpointing) or a full fine-tune."""
import argparse

import torch

from musubi_tuner.modules.custom_offloading_utils import BlockSwapConfig, create_offloader
from device_bytes import device_bytes, reference_device_bytes
from tiny_transformer import TinyTransformer, batches, train

parser = argparse.ArgumentParser()
parser.add_argument("--blocks_to_swap", type=int, default=2)
parser.add_argument("--gradient_checkpointing", action="store_true")
parser.add_argument("--full_fine_tune", action="store_true")
parser.add_argument("--out", required=True)
args = parser.parse_args()

model = TinyTransformer(6, reentrant=True)
parameters = model.lora_parameters
if args.full_fine_tune:
    parameters = model.fine_tune().all_parameters
model.gradient_checkpointing = args.gradient_checkpointing
config = BlockSwapConfig.from_args(args, torch.device("cpu"), supports_backward=True)
model.offloader = create_offloader("blocks", model.blocks, len(model.blocks), args.blocks_to_swap,
                                   config)
losses, _ = train(model, batches(3), parameters=parameters)
result = {"losses": losses, "state": model.state_dict(),
          "offloader": type(model.offloader).__name__, "stats": model.offloader.stats()}
if hasattr(model.offloader, "slot_address_ranges"):  # streaming
    result["device_bytes"] = device_bytes(model.offloader, model.blocks)
    result["reference_device_bytes"] = reference_device_bytes(model.blocks, args.blocks_to_swap)
torch.save(result, args.out)
