"""The reference's activation offloading helpers: nested moves of tensors,
the Unsloth-style checkpointer that keeps a block's input on the host until
backward, and the wrapper that runs a function on the device but hands its
outputs back on the host. Nothing here talks to blockswapd."""
import torch


def _map_tensors(x, move):
    """`x` with `move` applied to every tensor in nested lists, tuples and
    dicts (tuples come back as plain tuples); anything else is kept."""
    if isinstance(x, torch.Tensor):
        return move(x)
    if isinstance(x, list):
        return [_map_tensors(item, move) for item in x]
    if isinstance(x, tuple):
        return tuple(_map_tensors(item, move) for item in x)
    if isinstance(x, dict):
        return {key: _map_tensors(value, move) for key, value in x.items()}
    return x


def to_device(x, device):
    """Every tensor in `x` (nested lists, tuples, dicts) moved to `device`."""
    return _map_tensors(x, lambda t: t.to(device))


def to_cpu(x):
    """Every tensor in `x` (nested lists, tuples, dicts) moved to the CPU."""
    return _map_tensors(x, lambda t: t.cpu())


def _detach_variable(inputs, device=None):
    """A tuple like `inputs` whose tensors are detached (moved to `device`
    first when given), each keeping its requires_grad; other items as they are."""
    if not isinstance(inputs, tuple):
        raise RuntimeError("Only tuple of tensors is supported. Got Unsupported input type: ",
                           type(inputs).__name__)
    detached = []
    for item in inputs:
        if isinstance(item, torch.Tensor):
            wanted = item.requires_grad
            item = (item if device is None else item.to(device=device)).detach()
            item.requires_grad = wanted
        detached.append(item)
    return tuple(detached)


try:  # as the reference: DeepSpeed's own when it is installed
    from deepspeed.runtime.activation_checkpointing.checkpointing import detach_variable
except ImportError:
    detach_variable = _detach_variable


def _amp(decorator):
    # torch.amp.custom_fwd/bwd take device_type from torch 2.4 on; before, only
    # the CUDA spelling exists.
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, decorator):
        return getattr(amp, decorator)(device_type="cuda")
    return getattr(torch.cuda.amp, decorator)


class UnslothOffloadedGradientCheckpointer(torch.autograd.Function):
    """Gradient checkpointing that keeps the block's input on the host:
    forward runs `forward_function` without a graph and copies the input to
    the CPU (non-blocking, so the copy overlaps compute); backward brings it
    back to the device it came from, recomputes and backpropagates."""

    @staticmethod
    @_amp("custom_fwd")
    def forward(ctx, forward_function, hidden_states, *args):
        ctx.input_device = hidden_states.device
        on_host = hidden_states.to("cpu", non_blocking=True)
        with torch.no_grad():
            output = forward_function(hidden_states, *args)
        ctx.save_for_backward(on_host)
        ctx.forward_function = forward_function
        # Kept on ctx, not saved: the caller holds them (they are the block's
        # other inputs) until backward anyway.
        ctx.args = args
        return output

    @staticmethod
    @_amp("custom_bwd")
    def backward(ctx, *grads):
        (on_host,) = ctx.saved_tensors
        hidden_states = on_host.to(ctx.input_device, non_blocking=True).detach()
        hidden_states.requires_grad_(True)
        inputs = (hidden_states,) + detach_variable(ctx.args)
        with torch.enable_grad():
            outputs = ctx.forward_function(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        grads = grads if isinstance(grads, tuple) else (grads,)
        pairs = [(out, grad) for out, grad in zip(outputs, grads)
                 if isinstance(out, torch.Tensor) and out.requires_grad]
        torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])
        return (None,) + tuple(item.grad if isinstance(item, torch.Tensor) else None
                               for item in inputs)


def _without_dynamo(function):
    disable = getattr(torch, "_disable_dynamo", None)
    return disable(function) if disable is not None else function


@_without_dynamo
def unsloth_checkpoint(function, *args):
    """`function(*args)` checkpointed by UnslothOffloadedGradientCheckpointer
    (its first argument is the one kept on the host)."""
    return UnslothOffloadedGradientCheckpointer.apply(function, *args)


def create_cpu_offloading_wrapper(func, device):
    """`func` wrapped to take its inputs from anywhere (moved to `device`)
    and return its outputs on the CPU."""
    def custom_forward(*inputs):
        return to_cpu(func(*to_device(inputs, device)))
    return custom_forward
