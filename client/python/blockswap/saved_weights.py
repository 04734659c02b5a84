"""Training through streamed blocks without gradient checkpointing (docs/client.md).

A streamed weight is a view of a ring slot that the next blocks overwrite
long before backward runs, so autograd must not keep it. While a streaming
block runs forward in a pass that may need backward, saved-tensor hooks
(`torch.autograd.graph.saved_tensors_hooks`) pack:
  - a tensor that aliases a ring slot as `SlotView` (block, dtype, size,
    stride, offset in the slot), unpacked as the same view of the slot that
    holds the block at unpack time;
  - a cast of one of the block's streamed tensors (autocast's bf16 copy of an
    fp32 weight), or its dequantization (an fp8 weight cast and multiplied
    by its module's scale, as fp8-scaled checkpoints are used), as
    `WeightCast` (block, tensor, scale, dtypes, view geometry), computed
    again from the slot at unpack time, so that no block's casts stay on the
    device until backward;
  - anything else as the hooks outside ours (a trainer's `save_on_cpu`)
    pack it, or as autograd saves it where there are none.
Backward reaches a block while the ring holds it (the hooks below prefetch
behind); where it does not (an unpack out of the expected order), the
offloader loads it on demand, a self-heal counted in the statistics.

A block's backward work (free its slot, prefetch behind, wait for the block
that runs next) runs when its backward is done, whichever way its inputs came:
`BlockBackward` is an identity over the call's tensor inputs, positional or
keyword, whose backward runs once every input gradient of that call exists.

Checkpointing inside a block pushes its own hooks, which are innermost there
and win: ours see nothing of the checkpointed part.
"""
import torch

# Bitwise comparison of a candidate cast: an integer view of the same width.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class BlockBackward(torch.autograd.Function):
    """Identity over one block call's tensor inputs; `on_backward` runs in
    backward once the block has produced the gradient of every input that
    requires one. Inputs that need none come back non-differentiable, as
    they went in, so no gradient is computed for them."""

    @staticmethod
    def forward(ctx, on_backward, *tensors):
        ctx.on_backward = on_backward
        ctx.mark_non_differentiable(*[t for t in tensors if not t.requires_grad])
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        ctx.on_backward()
        return (None, *grads)


def through_block_backward(on_backward, args, kwargs):
    """`args` and `kwargs` with every tensor passed through one BlockBackward
    (unchanged where nothing requires grad: there is no backward to run)."""
    where = [("a", i) for i, a in enumerate(args) if isinstance(a, torch.Tensor)] + \
            [("k", k) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    tensors = [args[i] if kind == "a" else kwargs[i] for kind, i in where]
    if not any(t.requires_grad for t in tensors):
        return args, kwargs
    outputs = BlockBackward.apply(on_backward, *tensors)
    args, kwargs = list(args), dict(kwargs)
    for (kind, i), output in zip(where, outputs):
        if kind == "a":
            args[i] = output
        else:
            kwargs[i] = output
    return tuple(args), kwargs


class SlotView:
    __slots__ = ("block", "dtype", "size", "stride", "offset")

    def __init__(self, block, tensor):
        self.block, self.dtype = block, tensor.dtype
        self.size, self.stride, self.offset = tensor.size(), tensor.stride(), \
            tensor.storage_offset()


class WeightCast:
    """One of the block's streamed tensors (`tensor`, its index) cast to
    `compute`, times its module's attribute `scale` cast to `compute` where
    `scale` names one, cast to `dtype`; seen through the saved view's
    geometry."""
    __slots__ = ("block", "tensor", "scale", "compute", "dtype", "size", "stride", "offset")

    def __init__(self, block, index, recipe, tensor):
        self.block, self.tensor = block, index
        self.scale, self.compute = recipe
        self.dtype = tensor.dtype
        self.size, self.stride, self.offset = tensor.size(), tensor.stride(), \
            tensor.storage_offset()


class _Outer:
    __slots__ = ("packed",)

    def __init__(self, packed):
        self.packed = packed


def _storage_pointer(tensor):
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage (a fake or functional tensor)
        return None


# A module's scale of its fp8 weight: `scale_weight` in musubi-tuner's and
# sd-scripts' fp8 optimization (and ComfyUI), `weight_scale` in
# compressed-tensors and torchao checkpoints.
SCALE_ATTRIBUTES = ("scale_weight", "weight_scale")


def rebuild(weight, scale, compute, dtype):
    """`weight` cast to `compute`, times `scale` (None: no scale) cast to
    `compute`, cast to `dtype`: what a trainer's forward makes of a streamed
    weight. A 3-d scale is block-wise, (rows, blocks, 1): one scale per row
    and run of columns, as musubi-tuner's block-wise fp8 dequantizes."""
    value = weight.to(compute)
    if scale is not None:
        scale = scale.to(compute)
        if scale.dim() < 3:
            value = value * scale
        else:
            rows, blocks = scale.shape[:2]
            value = (value.contiguous().view(rows, blocks, -1) * scale).view(weight.shape)
    return value.to(dtype)


def _same_bits(tensor, value):
    """Whether `tensor` is `value`'s storage seen through `tensor`'s geometry,
    bit for bit."""
    if value.dtype != tensor.dtype or \
            value.untyped_storage().nbytes() != tensor.untyped_storage().nbytes():
        return False
    try:
        view = value.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    except RuntimeError:  # the geometry does not fit
        return False
    bits = _BITS[tensor.element_size()]
    return torch.equal(view.view(bits), tensor.view(bits))


def recipe_of(tensor, weight, module):
    """(scale attribute or None, compute dtype) with which `rebuild` makes
    `tensor` (or the storage it views) from `weight` bit for bit, or None.
    Tried, cheapest first: a plain cast; the weight times a scale of
    `module` in `tensor`'s dtype; and in the scale's dtype, then cast (the
    dequantization under autocast). Each candidate is computed and compared,
    so that a token is only ever one that rebuilds the tensor exactly."""
    if tensor.element_size() not in _BITS or \
            tensor.untyped_storage().nbytes() != weight.numel() * tensor.element_size():
        return None
    dtype = tensor.dtype
    candidates = [(None, dtype)] if dtype != weight.dtype else []
    for name in SCALE_ATTRIBUTES:
        scale = getattr(module, name, None)
        if isinstance(scale, torch.Tensor) and scale is not weight and \
                scale.is_floating_point():
            candidates.append((name, dtype))
            if scale.dtype != dtype:
                candidates.append((name, scale.dtype))
    for name, compute in candidates:
        scale = None if name is None else getattr(module, name)
        try:
            if not _first_row_may_match(tensor, weight, scale, compute):
                continue
            value = rebuild(weight, scale, compute, dtype)
        except RuntimeError:  # a scale whose shape does not fit the weight
            continue
        if _same_bits(tensor, value):
            return name, compute
    return None


def _first_row_may_match(tensor, weight, scale, compute):
    """A cheap rejection before the full candidate is computed: the candidate
    built from the weight's first row against the first elements of
    `tensor`'s storage (a cast keeps the weight's contiguous layout). True
    where the first row says nothing (a scale not laid out by rows)."""
    if weight.dim() < 2 or not weight.is_contiguous():
        return True
    if scale is not None and scale.numel() != 1:
        if scale.dim() < 2 or scale.shape[0] != weight.shape[0]:
            return True
        scale = scale[:1]
    row = rebuild(weight[:1], scale, compute, tensor.dtype).reshape(-1)
    storage = tensor.untyped_storage()
    start = tensor.new_empty(0).set_(storage, 0, (row.numel(),))
    bits = _BITS[tensor.element_size()]
    return torch.equal(row.view(bits), start.view(bits))


class SavedWeightHooks:
    """The saved-tensor hooks of one streaming block's forward call.

    `ring` is the offloader, which answers `slot_of_storage(pointer)` (the
    slot whose memory starts there, or None), `slot_owner(slot)`,
    `streamed_tensors(block)` (the block's streamed tensors as bound now),
    `streamed_modules(block)` (the module of each, whose scale a
    dequantization multiplies by) and
    `slot_memory(block)` (the uint8 tensor over the slot holding `block`,
    loaded on demand if it does not)."""

    def __init__(self, ring, block, device):
        self._ring, self._block, self._device = ring, block, device
        self._outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        self._context = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self):
        self._context.__enter__()
        return self

    def __exit__(self, *exc):
        self._context.__exit__(*exc)

    def _pack(self, tensor):
        if tensor.device == self._device and not tensor.requires_grad:
            slot = self._ring.slot_of_storage(_storage_pointer(tensor))
            if slot is not None:
                return SlotView(self._ring.slot_owner(slot), tensor)
            if tensor.is_floating_point():
                for index, (weight, module) in enumerate(zip(
                        self._ring.streamed_tensors(self._block),
                        self._ring.streamed_modules(self._block))):
                    recipe = recipe_of(tensor, weight, module)
                    if recipe is not None:
                        return WeightCast(self._block, index, recipe, tensor)
        return _Outer(self._outer[0](tensor)) if self._outer is not None else tensor

    def _unpack(self, packed):
        if isinstance(packed, SlotView):
            memory = self._ring.slot_memory(packed.block)
            return memory.view(packed.dtype).as_strided(packed.size, packed.stride,
                                                        packed.offset)
        if isinstance(packed, WeightCast):
            self._ring.slot_memory(packed.block)
            weight = self._ring.streamed_tensors(packed.block)[packed.tensor]
            module = self._ring.streamed_modules(packed.block)[packed.tensor]
            scale = None if packed.scale is None else getattr(module, packed.scale)
            value = rebuild(weight, scale, packed.compute, packed.dtype)
            return value.as_strided(packed.size, packed.stride, packed.offset)
        if isinstance(packed, _Outer):
            return self._outer[1](packed.packed)
        return packed
