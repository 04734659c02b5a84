"""Block swapping for a diffusers model with the model's own forward.

    import blockswap.diffusers
    swap = blockswap.diffusers.attach(transformer, blocks_to_swap=8, config=config)
    transformer(hidden_states=..., ...)   # the pipeline's calls, unchanged
    swap.close()

diffusers' forward runs its block lists itself (Flux: `transformer_blocks`
then `single_transformer_blocks`; SD3, PixArt, Wan, HunyuanVideo likewise),
calling each block with keyword arguments. Instead of a rewritten loop,
`attach` gives every block list an offloader (`create_offloader`) and drives
it from hooks: a forward pre-hook on the model prepares every list, pre- and
post-hooks on each block wait for it and submit the next move. The block
hooks act only inside the model's forward, so a block that gradient
checkpointing recomputes in backward is left to the offloader's backward
hooks.

Inference needs nothing more (no backward, keyword calls are fine). Training
is tested with gradient checkpointing (`model.enable_gradient_checkpointing()`)
and without it, where weights saved for backward come back from the ring
(blockswap/saved_weights.py). A pass with grad disabled (sampling between
training steps) runs forward-only.
"""
import torch.nn as nn

from .routing import create_offloader


def block_lists(model):
    """The names of `model`'s direct ModuleList children that hold its
    blocks: those whose name ends in "blocks", in definition order."""
    return [name for name, child in model.named_children()
            if isinstance(child, nn.ModuleList) and name.endswith("blocks") and len(child)]


class DiffusersBlockSwap:
    """The offloaders of one model's block lists and the hooks that drive them."""

    def __init__(self, model, blocks_to_swap, config, lists=None):
        lists = list(lists) if lists is not None else block_lists(model)
        if not lists:
            raise ValueError(f"{model.__class__.__name__} has no block list (a ModuleList "
                             f"child named *blocks); pass lists=[...] naming them")
        if isinstance(blocks_to_swap, int):
            blocks_to_swap = {name: blocks_to_swap for name in lists}
        unknown = set(blocks_to_swap) - set(lists)
        if unknown:
            raise ValueError(f"blocks_to_swap names {sorted(unknown)}, which are not block "
                             f"lists of {model.__class__.__name__} ({lists})")
        self.model = model
        self.offloaders = {}
        self._handles = []
        self._in_forward = False
        for name in lists:
            blocks = getattr(model, name, None)
            if not isinstance(blocks, nn.ModuleList):
                raise ValueError(f"{model.__class__.__name__}.{name} is not a ModuleList of "
                                 f"blocks")
            self.offloaders[name] = create_offloader(name, blocks, len(blocks),
                                                     blocks_to_swap.get(name, 0), config)
            for index, block in enumerate(blocks):
                self._handles.append(block.register_forward_pre_hook(
                    self._before_block(name, index)))
                self._handles.append(block.register_forward_hook(self._after_block(name, index)))
        self._supports_backward = config.supports_backward
        self._handles.append(model.register_forward_pre_hook(self._before_model))
        self._handles.append(model.register_forward_hook(self._after_model, always_call=True))

    def _before_model(self, model, args):
        import torch
        for name, offloader in self.offloaders.items():
            if self._supports_backward:
                offloader.set_forward_only(not torch.is_grad_enabled())
            offloader.prepare_block_devices_before_forward(getattr(model, name))
        self._in_forward = True

    def _after_model(self, model, args, output):
        self._in_forward = False

    def _before_block(self, name, index):
        def hook(block, args):
            if self._in_forward:
                self.offloaders[name].wait_for_block(index)
        return hook

    def _after_block(self, name, index):
        def hook(block, args, output):
            if self._in_forward:
                self.offloaders[name].submit_move_blocks_forward(getattr(self.model, name), index)
        return hook

    def stats(self):
        return {name: offloader.stats() for name, offloader in self.offloaders.items()}

    def close(self):
        """Removes the hooks and closes the offloaders (the blocks keep private
        copies of their weights)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for offloader in self.offloaders.values():
            offloader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def attach(model, blocks_to_swap, config, lists=None):
    """Block-swaps `model`'s block lists (`lists`, default `block_lists(model)`)
    through `create_offloader` with `config`; `blocks_to_swap` is one count
    for every list or {list name: count}. Returns the DiffusersBlockSwap."""
    return DiffusersBlockSwap(model, blocks_to_swap, config, lists)
