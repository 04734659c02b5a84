"""The reference's `custom_offloading_utils` module, name for name, on blockswap.

What `python -m blockswap.kohya` puts in place of a trainer's own
`custom_offloading_utils` (sd-scripts' `library.`, musubi-tuner's
`musubi_tuner.modules.`), so that the names the trainer imports at its own
import time are these. `create_offloader` and `ModelOffloader` (in either signature
the trainers call) pick exchange or streaming alike (blockswap/routing.py);
`LoRAStreamOffloader` always streams through blockswapd.

Besides the reference's public names, its two private device helpers
(`_synchronize_device`, `_clean_memory_on_device`) are here, and under their
public names too, which some trainers import.
"""
from .activation_offload import (UnslothOffloadedGradientCheckpointer,
                                 create_cpu_offloading_wrapper, detach_variable, to_cpu,
                                 to_device, unsloth_checkpoint)
from .exchange import (Offloader, clean_memory_on_device,
                       swap_weight_devices_cuda, swap_weight_devices_no_cuda, synchronize_device,
                       weighs_to_device)
from .offloader import BlockSwapConfig, default_swap_tensor_selector
from .routing import LoRAStreamOffloader, ModelOffloader, create_offloader

_synchronize_device = synchronize_device
_clean_memory_on_device = clean_memory_on_device

# The reference module's public names, all of them.
__all__ = [
    "BlockSwapConfig", "LoRAStreamOffloader", "ModelOffloader", "Offloader",
    "UnslothOffloadedGradientCheckpointer", "create_cpu_offloading_wrapper", "create_offloader",
    "default_swap_tensor_selector", "detach_variable", "swap_weight_devices_cuda",
    "swap_weight_devices_no_cuda", "to_cpu", "to_device", "unsloth_checkpoint",
    "weighs_to_device",
]
