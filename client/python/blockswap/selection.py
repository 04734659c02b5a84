"""Which tensors of a block stream by default, and what they are called in a
checkpoint.

Trainers wrap frozen Linears in adapters: peft's LoRA layers (and its other
tuner layers) keep the original module as `base_layer` beside trainable
`lora_A` / `lora_B` children, all of them `*Linear` classes. Only frozen base
weights may stream (trained tensors are this process's own, and a ring slot
is overwritten under them), so the walk below enters an adapter wrapper
through its `base_layer` only, and the default selector takes the weights that
do not require grad.
"""
import torch.nn as nn

BASE_LAYER = "base_layer"


def _is_adapter_wrapper(module):
    """peft's tuner layers (BaseTunerLayer) and wrappers laid out like them."""
    return isinstance(getattr(module, BASE_LAYER, None), nn.Module)


def base_modules(block, prefix=""):
    """(path, module) of every module of `block` that is not part of an
    adapter: a wrapper is entered through its `base_layer` only."""
    if _is_adapter_wrapper(block):
        yield from base_modules(getattr(block, BASE_LAYER), _join(prefix, BASE_LAYER))
        return
    yield prefix, block
    for name, child in block.named_children():
        yield from base_modules(child, _join(prefix, name))


def _join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


def _frozen_linear_weight(module):
    weight = module._parameters.get("weight")
    return (module.__class__.__name__.endswith("Linear") and weight is not None
            and not weight.requires_grad)


def default_swap_tensor_selector(block):
    """The frozen weight of every ``*Linear`` module that is not part of an
    adapter, as ``(module, attribute)`` pairs: peft's `base_layer` of a LoRA
    layer streams; its `lora_A` / `lora_B`, and any weight that requires grad,
    stay in the trainer's process.

    A selector may return several tensors per module (an fp8 weight and its
    scale); each attribute must be a parameter or a registered buffer.
    """
    return [(module, "weight") for _, module in base_modules(block)
            if _frozen_linear_weight(module)]


def trainable_linears(block):
    """Paths of the `*Linear` modules outside adapters whose weight requires
    grad: what the default selector leaves out (for error messages)."""
    return [path or "(the block itself)" for path, module in base_modules(block)
            if module.__class__.__name__.endswith("Linear")
            and module._parameters.get("weight") is not None
            and module._parameters["weight"].requires_grad]


def checkpoint_tensor_name(name):
    """The name a block's tensor has in the model's checkpoint: an adapter
    wrapper's `base_layer.` segment dropped (peft renames
    `attn.to_q.weight` to `attn.to_q.base_layer.weight`)."""
    return ".".join(part for part in name.split(".") if part != BASE_LAYER)
