"""Like sd-scripts' model modules: the offloading module imported by its package path."""
from library import custom_offloading_utils


def enable_block_swap(model, blocks_to_swap, device):
    # What sd-scripts' models do: the exchange offloader, built directly.
    model.offloader = custom_offloading_utils.ModelOffloader(
        model.blocks, blocks_to_swap, device, supports_backward=True)
    return model.offloader
