"""Stands in for the trainer's own offloading module, with the reference's API
(the names below). It must never run: `python -m blockswap.kohya` replaces it."""
__all__ = ["BlockSwapConfig", "LoRAStreamOffloader", "ModelOffloader", "Offloader",
           "UnslothOffloadedGradientCheckpointer", "create_cpu_offloading_wrapper",
           "create_offloader", "default_swap_tensor_selector", "detach_variable",
           "swap_weight_devices_cuda", "swap_weight_devices_no_cuda", "to_cpu", "to_device",
           "unsloth_checkpoint", "weighs_to_device"]
raise ImportError(f"{__name__} of the stand-in ran: blockswap.kohya did not replace it")
