"""The streaming offloader: frozen blocks through blockswapd (docs/client.md).

The frozen weights of S evenly placed "streaming" blocks live once per node, in
blockswapd's masters; a ring of B slots on the trainer's device holds the blocks
about to run. Which block goes into which slot and when (placement, prefetch
ahead in forward and behind in backward, self-heal, wrap-around in inference,
no-op rebinds), and the set-up around it (attaching, the device, opening or
registering the model, matching each block with its layout, the ring and the
scheduler, the checks that need no torch, with their messages), is the client
library's offloader (bs_offloader_*, shared with the LibTorch layer). This
module keeps what needs torch: it selects the tensors, turns every binding the
offloader reports into tensors (the block's streamed tensors become views of
the slot, the block that held the slot before views of its read-only master),
and hooks the blocks' backward.
"""
import ctypes
import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn

from . import _abi, _fork
from ._memory import device_bytes, host_bytes, safetensors_dtype, typed_view
from .saved_weights import SavedWeightHooks, through_block_backward
from .selection import checkpoint_tensor_name, default_swap_tensor_selector, trainable_linears

__all__ = ["BlockSwapConfig", "StreamOffloader", "default_swap_tensor_selector"]


@dataclass
class BlockSwapConfig:
    """The reference's construction policy plus where blockswapd listens.

    `h2d_only=True` streams exactly `blocks_to_swap` frozen blocks through
    blockswapd (the reference's LoRAStreamOffloader), with or without gradient
    checkpointing. The default, `h2d_only=False`, is the reference's exchange
    of `blocks_to_swap` blocks: `create_offloader` streams frozen blocks
    instead, with no more device memory, and exchanges trainable ones
    in-process (blockswap/routing.py). `gradient_checkpointing` only says
    whether the trainer checkpoints (in messages).
    `use_pinned_memory` is accepted for compatibility only: blockswapd keeps
    one pinned master per node.
    """
    device: torch.device
    supports_backward: bool
    use_pinned_memory: bool = False
    h2d_only: bool = False
    ring_size: int = 2
    debug: bool = False
    # None: $BLOCKSWAP_SOCKET, else /run/blockswap/blockswapd.sock, else (nothing answering
    # there) the user's private blockswapd, started when needed (BLOCKSWAP_AUTOSTART=0: never)
    socket: Optional[str] = None
    gradient_checkpointing: bool = False
    swap_tensor_selector: Optional[Callable] = None
    client_name: Optional[str] = None
    # After losing blockswapd (a restart, a crash) the scheduler re-attaches,
    # reopens the model and re-creates its ring for up to this long, then
    # fails with UNAVAILABLE; 0 fails at once.
    reconnect_timeout_s: float = 30.0
    # A model blockswapd already holds instead of one uploaded from the blocks:
    # its id, or a safetensors file (or sharded *.index.json) registered with
    # the pattern and selector below. The selected tensors may then be meta
    # (never materialised); see StreamOffloader.
    model_id: Optional[str] = None
    model_file: Optional[str] = None
    model_block_pattern: str = r"^blocks\.(\d+)\."
    model_select: Optional[str] = None
    model_select_rank: int = 0
    # The model's name of a streamed tensor, from its name relative to the
    # block (`attn.to_q.base_layer.weight` under peft); None: the name with
    # adapter wrappers' `base_layer.` segments dropped (selection.py).
    model_tensor_name: Optional[Callable[[str], str]] = None

    @classmethod
    def from_args(cls, args, device, supports_backward):
        """From a parsed-args namespace, tolerating parsers without the optional
        knobs; refuses a ring smaller than one slot."""
        h2d_only = getattr(args, "block_swap_h2d_only", False)
        checkpointing = getattr(args, "gradient_checkpointing", False)
        ring_size = getattr(args, "block_swap_ring_size", 2)
        if ring_size < 1:
            raise ValueError(f"--block_swap_ring_size must be >= 1 (got {ring_size})")
        return cls(device=device, supports_backward=supports_backward,
                   use_pinned_memory=getattr(args, "use_pinned_memory_for_block_swap", False),
                   h2d_only=h2d_only, ring_size=ring_size,
                   socket=getattr(args, "blockswap_socket", None),
                   gradient_checkpointing=checkpointing)


# How long closing the ring may wait for its outstanding loads and its
# stream (bs_ring_close).
_CLOSE_TIMEOUT_MS = 5000


def _check_not_capturing(what):
    """blockswapd loads the streamed blocks and the wait for them is made on
    the host, which a captured CUDA graph cannot replay (under capture the
    event record and wait of the load protocol fail with a CUDA error that
    says nothing of it): refused with the library's reason."""
    # Without CUDA initialised in this process there is no capture to be in.
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        _abi.check(_abi.library().bs_offloader_refuse_capture(what.encode()))


def _placement(lib, offloader):
    """The offloader's streaming block indices, ascending, and ring size."""
    return ([lib.bs_offloader_streaming_block(offloader, r)
             for r in range(lib.bs_offloader_streaming_count(offloader))],
            lib.bs_offloader_ring_slots(offloader))


def _place_blocks(num_blocks, blocks_to_swap, ring_size):
    """The placement of an offloader, made without a daemon, for a choice
    made before any offloader exists (routing.py)."""
    _fork.check("placing the streaming blocks")
    lib, offloader = _abi.library(), ctypes.c_void_p()
    config = _abi.OffloaderConfig(num_blocks=num_blocks, blocks_to_swap=max(blocks_to_swap, 0),
                                  ring_size=ring_size)
    _abi.refuse(lib.bs_offloader_create(ctypes.byref(config), ctypes.byref(offloader)))
    try:
        return _placement(lib, offloader)
    finally:
        lib.bs_offloader_destroy(offloader)


def _text(value):
    return value.encode() if value else None


class _Job:
    """One streamed tensor: module attribute, its name relative to the block."""
    __slots__ = ("module", "attr", "is_param", "name")

    def __init__(self, module, attr, is_param, name):
        self.module, self.attr, self.is_param, self.name = module, attr, is_param, name


class StreamOffloader:
    """The reference offloader's interface over blockswapd.

    Call order, as in the reference trainer: `prepare_block_devices_before_forward`
    before a forward pass (once, and again after anything that ran the blocks
    differently, e.g. sampling during training), then per block i of the forward
    loop `wait_for_block(i)`, the block, `submit_move_blocks_forward(blocks, i)`.
    Backward needs nothing: hooks on the blocks drive it, and training needs no
    gradient checkpointing (blockswap/saved_weights.py). Blocks may take their
    inputs positionally or as keywords.

    With `model_id` or `model_file` the streamed tensors come from that model
    and may be meta tensors: per block, the selector's tensors are matched by
    name (relative to the block) with the model block's, dtype and shape
    checked, and nothing is uploaded. A model of every block (what a file
    gives) also fills the resident blocks' selected tensors (copied to the
    device); a model of only the streaming blocks (in order) leaves those to
    the trainer.
    """

    def __init__(self, block_type, blocks, num_blocks, blocks_to_swap, config):
        if len(blocks) != num_blocks:
            raise ValueError(f"num_blocks is {num_blocks} but {len(blocks)} blocks were given")
        if blocks_to_swap < 0:
            raise ValueError(f"blocks_to_swap must be >= 0 (got {blocks_to_swap})")
        self.block_type = block_type
        self.num_blocks = num_blocks
        self.blocks_to_swap = blocks_to_swap
        self.device = torch.device(config.device)
        self.supports_backward = config.supports_backward
        self.forward_only = not config.supports_backward
        self.debug = config.debug
        self._config = config
        self._blocks = blocks
        self._selector = config.swap_tensor_selector or default_swap_tensor_selector
        self._stream = None
        self._bind_fn = None
        self._callback_error = None
        self._lib = self._offloader = None
        self._master_views = {}  # block -> [tensor or Parameter per job]
        self._slot_views = {}    # block -> the same over its ring slot
        self._slot_flat = []     # slot -> uint8 tensor over the slot
        self._slot_bytes = 0
        self._slot_of_pointer = {}  # slot memory's address -> slot
        self._in_block = []      # (block, its SavedWeightHooks or None), innermost last
        self.remove_handles = []
        self._create()
        self.S = len(self.stream_idx)
        self.rank = {block: rank for rank, block in enumerate(self.stream_idx)}
        self.is_stream = [block in self.rank for block in range(num_blocks)]
        self._from_daemon = bool(config.model_id or config.model_file)
        # A model from the daemon may also fill resident blocks: select in all.
        self._jobs = {block: self._select(block) for block in
                      (range(num_blocks) if self._from_daemon else self.stream_idx)}
        self._check_frozen()
        if self.S == 0:
            return
        self._connect()
        if self.supports_backward:
            # A block's backward work frees its slot (streaming) or makes the
            # streaming block before it ready (the one after a streaming block).
            for i, block in enumerate(blocks):
                if self.is_stream[i] or (i > 0 and self.is_stream[i - 1]):
                    self.remove_handles.append(block.register_forward_pre_hook(
                        self._before_block(i), with_kwargs=True))
                if self.is_stream[i]:
                    self.remove_handles.append(block.register_forward_hook(
                        self._after_block(i), always_call=True))
        if self.debug:
            print(f"blockswap[{self.block_type}]: {self.S} streaming / {num_blocks} blocks, "
                  f"ring={self.B}, streaming indices: {self.stream_idx}")

    # ------------------------------------------------------------------ set-up

    def _create(self):
        """The library's offloader: the configuration checked and the streaming
        blocks placed (bs_place_blocks), before anything is registered."""
        _fork.check("placing the streaming blocks")
        config = self._config
        lib = _abi.library()
        c = _abi.OffloaderConfig(
            self.block_type.encode(), self.num_blocks, self.blocks_to_swap, config.ring_size,
            int(self.forward_only), _text(config.socket),
            (config.client_name or f"python:{self.block_type}:{os.getpid()}").encode(),
            _text(config.model_id), _text(config.model_file), config.model_block_pattern.encode(),
            _text(config.model_select), config.model_select_rank, self.block_type.encode(),
            float(config.reconnect_timeout_s),
            b"BlockSwapConfig.model_tensor_name maps the names")
        offloader = ctypes.c_void_p()
        _abi.refuse(lib.bs_offloader_create(ctypes.byref(c), ctypes.byref(offloader)))
        self._lib, self._offloader = lib, offloader
        self.stream_idx, self.B = _placement(lib, offloader)

    def _select(self, block_idx):
        block = self._blocks[block_idx]
        names = {id(module): name for name, module in block.named_modules()}
        jobs = []
        for module, attr in self._selector(block):
            prefix, kind = names.get(id(module)), module.__class__.__name__
            if prefix is None:  # a module of another block, or of none
                _abi.refuse(self._lib.bs_offloader_refuse_selection(
                    self._offloader, block_idx, kind.encode(), None))
            if attr not in module._parameters and attr not in module._buffers:
                owner = f"{prefix or '(the block itself)'} ({kind})"
                _abi.refuse(self._lib.bs_offloader_refuse_selection(
                    self._offloader, block_idx, owner.encode(), attr.encode()))
            jobs.append(_Job(module, attr, attr in module._parameters,
                             f"{prefix}.{attr}" if prefix else attr))
        return jobs

    def _describe(self, block, keep, upload=False):
        """The library's view of the block's streamed tensors as they are now
        (bs_offloader_tensor); `keep` holds what must outlive the call."""
        # Blocks this process uploads keep their own names; a model from a file
        # (or opened by id) has the checkpoint's.
        to_model = (self._config.model_tensor_name or checkpoint_tensor_name) \
            if self._from_daemon else (lambda name: name)
        jobs = self._jobs.get(block, [])
        tensors = (_abi.OffloaderTensor * max(1, len(jobs)))()
        for k, job in enumerate(jobs):
            t = getattr(job.module, job.attr)
            requires_grad = job.is_param and t.requires_grad
            t, data = t.detach(), None
            if upload and not t.is_meta:
                t = t.to("cpu").contiguous()
                data = t.data_ptr()
            shape = (ctypes.c_uint64 * max(1, t.dim()))(*t.shape)
            name = to_model(job.name).encode()
            keep += [t, shape, name]
            dtype = safetensors_dtype(t.dtype, f"{job.name} of {self.block_type} block {block}")
            tensors[k] = _abi.OffloaderTensor(name, dtype.encode(), shape, t.dim(), data,
                                              int(requires_grad), int(t.is_meta))
        keep.append(tensors)
        return tensors, len(jobs)

    def _check_frozen(self, selected=False):
        """Refuses a streamed tensor that requires grad, and once `selected`
        (the first prepare), a streaming block with nothing to stream."""
        for block in self.stream_idx:
            if self._jobs[block] or selected:
                keep = []
                _abi.refuse(self._lib.bs_offloader_check_block(self._offloader, block,
                                                               *self._describe(block, keep)))

    def _select_at_first_prepare(self):
        """The default selector chooses by requires_grad, which trainers set
        after building the offloader: select again, and refuse a streaming
        block left with nothing to stream."""
        if self._config.swap_tensor_selector is None:
            self._jobs = {block: self._select(block) for block in self._jobs}
        for block in self.stream_idx:
            trained = trainable_linears(self._blocks[block])
            if not self._jobs[block] and trained:
                raise ValueError(
                    f"blockswap: {self.block_type} block {block} has no frozen tensor to stream"
                    f": its Linears {', '.join(trained)} require grad (a full fine-tune trains "
                    f"them in this process; leave h2d_only / model_id / model_file out to "
                    f"exchange blocks instead)")

    def _connect(self):
        """Attaches and names the daemon's device that is this one."""
        lib, offloader = self._lib, self._offloader
        _abi.check(lib.bs_offloader_connect(offloader))
        if lib.bs_offloader_backend(offloader) == _abi.BS_BACKEND_CUDA and \
                self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        _abi.refuse(lib.bs_offloader_use_device(
            offloader, self.device.index or 0 if self.device.type == "cuda" else -1, None,
            str(self.device).encode()))

    def _first_prepare(self):
        self._select_at_first_prepare()
        self._check_frozen(selected=True)  # again: the trainer may have changed its mind
        lib, offloader, keep = self._lib, self._offloader, []
        blocks = (_abi.OffloaderBlock * self.num_blocks)()
        for block in range(self.num_blocks):
            blocks[block] = _abi.OffloaderBlock(*self._describe(block, keep,
                                                                upload=self.is_stream[block]))
        _abi.refuse(lib.bs_offloader_open_model(offloader, blocks))
        del keep
        for block in self._jobs:
            master = lib.bs_offloader_master(offloader, block)
            if not master:
                continue
            views = self._views(block, host_bytes(master,
                                                  lib.bs_offloader_master_bytes(offloader, block)))
            if self.is_stream[block]:
                self._master_views[block] = views
            else:  # a model of every block gives the resident blocks' tensors too
                self._bind(block, [nn.Parameter(v.to(self.device, copy=True), requires_grad=False)
                                   if isinstance(v, nn.Parameter) else v.to(self.device, copy=True)
                                   for v in views])
        for i, block in enumerate(self._blocks):
            # Detach the streamed tensors so that moving the rest of the block
            # to the device neither copies them nor moves their masters.
            for job in self._jobs[i] if self.is_stream[i] else ():
                current = getattr(job.module, job.attr)
                empty = torch.empty(0, dtype=current.dtype)
                setattr(job.module, job.attr,
                        nn.Parameter(empty, requires_grad=False) if job.is_param else empty)
            for name, tensor in [*block.named_parameters(), *block.named_buffers()]:
                _abi.refuse(lib.bs_offloader_check_materialised(offloader, i, name.encode(),
                                                                int(tensor.is_meta)))
            block.to(self.device)
            if self.is_stream[i]:
                self._bind(i, self._master_views[i])
        if self.device.type == "cuda":
            self._stream = torch.cuda.current_stream(self.device)
        self._bind_fn = _abi.BIND_FN(self._on_bind)
        _abi.check(lib.bs_offloader_start(
            offloader, self._stream.cuda_stream if self._stream is not None else None,
            self._bind_fn, None))
        self._map_slots()

    def _views(self, block, flat):
        """Views of the block's streamed tensors in `flat` (its master or its
        slot), where the model's layout puts them."""
        views = []
        for k, job in enumerate(self._jobs[block]):
            template = getattr(job.module, job.attr)
            offset = self._lib.bs_offloader_tensor_offset(self._offloader, block, k)
            view = typed_view(flat, offset, template.dtype, template.shape)
            views.append(nn.Parameter(view, requires_grad=False) if job.is_param else view)
        return views

    def _map_slots(self):
        """Tensors over the ring's slots as the library has them now (a ring
        re-created after a daemon restart has new memory)."""
        lib, offloader = self._lib, self._offloader
        self._slot_bytes = lib.bs_offloader_slot_bytes(offloader)
        self._slot_flat = [device_bytes(lib.bs_offloader_slot(offloader, s), self._slot_bytes,
                                        self.device) for s in range(self.B)]
        self._slot_of_pointer = {flat.untyped_storage().data_ptr(): s
                                 for s, flat in enumerate(self._slot_flat)}
        for rank, block in enumerate(self.stream_idx):
            self._slot_views[block] = self._views(block, self._slot_flat[rank % self.B])

    # ------------------------------------------------------------------ bindings

    def _bind(self, block, tensors):
        for job, tensor in zip(self._jobs[block], tensors):
            setattr(job.module, job.attr, tensor)

    def _on_bind(self, _user_data, block, slot, previous, loaded):
        # Runs inside an offloader call (on the caller's thread); an exception
        # cannot cross the C ABI, so it is kept and raised when the call returns.
        try:
            if self._lib.bs_offloader_slot(self._offloader, slot) != \
                    self._slot_flat[slot].data_ptr():
                # The scheduler re-created its ring (it re-attached after losing
                # blockswapd) and reloads every slot: bind to the new memory.
                self._map_slots()
            if previous != _abi.NONE:
                self._bind(previous, self._master_views[previous])  # eviction is free
            self._bind(block, self._slot_views[block])
            if loaded:
                # The daemon's copy bumps no version counter: do it here, so that
                # autograd refuses a tensor saved for backward from the slot's
                # previous content instead of computing with the new one.
                torch.autograd.graph.increment_version(self._slot_flat[slot])
        except BaseException as error:  # noqa: BLE001 (re-raised by _call)
            self._callback_error = error

    def _call(self, function, *args, what):
        _fork.check(what)
        _check_not_capturing(what)
        if self._lib is None:
            raise RuntimeError(f"blockswap: {what} after close()")
        if self._stream is not None:
            current = torch.cuda.current_stream(self.device)
            if current != self._stream:
                raise RuntimeError(
                    f"blockswap orders its loads against the CUDA stream that was current at the "
                    f"first prepare ({self._stream}), but {what} runs on {current}: run the "
                    f"blocks on one stream, or prepare under the stream they run on")
        code = getattr(self._lib, function)(self._offloader, *args)
        error, self._callback_error = self._callback_error, None
        if error is not None:
            raise error
        _abi.check(code, what)

    # ------------------------------------------------------------------ the reference's interface

    def prepare_block_devices_before_forward(self, blocks=None):
        if self.S == 0:
            return
        _fork.check("prepare_block_devices_before_forward")
        _check_not_capturing("prepare_block_devices_before_forward")
        if not self._slot_flat:
            self._first_prepare()
        self._call("bs_offloader_prepare", what="prepare_block_devices_before_forward")

    def wait_for_block(self, block_idx):
        if self.S == 0 or not self.is_stream[block_idx]:
            return
        self._call("bs_offloader_wait_for_block", block_idx,
                   what=f"wait_for_block({block_idx})")

    def submit_move_blocks_forward(self, blocks, block_idx):
        if self.S == 0 or not self.is_stream[block_idx]:
            return
        self._call("bs_offloader_after_forward", block_idx,
                   what=f"submit_move_blocks_forward({block_idx})")

    def set_forward_only(self, forward_only):
        self.forward_only = bool(forward_only)
        if self.S:
            self._call("bs_offloader_set_forward_only", int(self.forward_only),
                       what="set_forward_only")

    def _before_block(self, block_idx):
        def hook(module, args, kwargs):
            if self.forward_only or not torch.is_grad_enabled() or not self._slot_flat:
                if self.is_stream[block_idx]:
                    self._in_block.append((block_idx, None))
                return None
            args, kwargs = through_block_backward(lambda: self._after_backward(block_idx),
                                                  args, kwargs)
            if self.is_stream[block_idx]:
                saving = SavedWeightHooks(self, block_idx, self.device)
                saving.__enter__()
                self._in_block.append((block_idx, saving))
            return args, kwargs
        return hook

    def _after_block(self, block_idx):
        # Registered with always_call: also when the block's forward raised,
        # so that no hooks of ours outlive the call.
        def hook(module, args, output):
            if self._in_block and self._in_block[-1][0] == block_idx:
                _, saving = self._in_block.pop()
                if saving is not None:
                    saving.__exit__(None, None, None)
            return None
        return hook

    def _after_backward(self, block_idx):
        if self._slot_flat:
            self._call("bs_offloader_after_backward", block_idx,
                       what=f"the backward of block {block_idx}")

    # ------------------------------------------------------------------ saved weights
    # What SavedWeightHooks asks of the ring.

    def slot_of_storage(self, pointer):
        return self._slot_of_pointer.get(pointer)

    def slot_owner(self, slot):
        block = self._lib.bs_offloader_slot_block(self._offloader, slot)
        return None if block == _abi.NONE else block

    def streamed_tensors(self, block_idx):
        return [getattr(job.module, job.attr) for job in self._jobs[block_idx]]

    def streamed_modules(self, block_idx):
        return [job.module for job in self._jobs[block_idx]]

    def slot_memory(self, block_idx):
        """The uint8 tensor over the slot of `block_idx`, which holds it (loaded
        on demand, a self-heal, when it does not)."""
        self._call("bs_offloader_ensure_block", block_idx,
                   what=f"bringing block {block_idx} back for its backward")
        return self._slot_flat[self.rank[block_idx] % self.B]

    # ------------------------------------------------------------------ introspection

    @property
    def model_id(self):
        _fork.check("model_id")
        if self.S == 0 or self._lib is None:
            return None
        return self._lib.bs_offloader_model_id(self._offloader).decode() or None

    def slot_address_ranges(self):
        """[(start, end)] of each ring slot's memory, for checks that a tensor lives there."""
        return [(flat.data_ptr(), flat.data_ptr() + self._slot_bytes) for flat in self._slot_flat]

    def master_address_ranges(self):
        """[(start, end)] of each streaming block's master (host memory of the
        daemon's one copy), for checks that a tensor is off the device."""
        if not self._master_views:
            return []
        lib, offloader = self._lib, self._offloader
        return [(lib.bs_offloader_master(offloader, block),
                 lib.bs_offloader_master(offloader, block)
                 + lib.bs_offloader_master_bytes(offloader, block)) for block in self.stream_idx]

    def stats(self, finish_pass=True):
        """Placement and the last finished pass's statistics per direction:
        stall_seconds is how long the compute stream sat idle at the pass's
        waits (time lost), host_wait_seconds how long the training thread
        blocked in them (mostly its own compute draining). copy_seconds is the
        daemon's copy-stream time for the ring's copies that the pass's waits
        saw complete (each copy counted once; a pass's last prefetches count
        in the next pass)."""
        _fork.check("stats")
        result = {"mode": "stream", "block_type": self.block_type, "model_id": self.model_id,
                  "streaming_blocks": list(self.stream_idx), "ring_slots": self.B,
                  "forward": None, "backward": None}
        if not self._slot_flat:
            return result
        if finish_pass:
            self._call("bs_offloader_finish_pass", what="stats")
        for key, direction in (("forward", _abi.BS_FORWARD), ("backward", _abi.BS_BACKWARD)):
            out = _abi.PassStats()
            if self._lib.bs_offloader_last_pass(self._offloader, direction, ctypes.byref(out)):
                continue  # no pass in that direction yet
            result[key] = {name: getattr(out, name) for name, _ in _abi.PassStats._fields_
                           if name != "direction"}
        return result

    # ------------------------------------------------------------------ teardown

    def close(self):
        """Gives every streamed tensor a private copy of its bytes (so the
        blocks stay usable) and releases the scheduler, ring, model and session."""
        for handle in self.remove_handles:
            handle.remove()
        self.remove_handles = []
        lib = self._lib
        if lib is None:
            return
        offloader, self._offloader, self._lib = self._offloader, None, None
        if _fork.in_forked_child():
            # The handles are the parent's: destroying them here would end its
            # session. The child's copies of the mappings go when it exits.
            return
        for block, views in self._master_views.items():
            copies = [v.detach().to(self.device, copy=True) for v in views]
            self._bind(block, [nn.Parameter(c, requires_grad=False) if isinstance(v, nn.Parameter)
                               else c for v, c in zip(views, copies)])
        self._master_views, self._slot_views, self._slot_flat = {}, {}, []
        # The releases recorded after the stream's last use of the slots (an
        # error here cannot be acted on: the ring is closed all the same).
        stream = ctypes.c_void_p(self._stream.cuda_stream) if self._stream is not None else None
        lib.bs_offloader_close(offloader, stream, _CLOSE_TIMEOUT_MS)
        lib.bs_offloader_destroy(offloader)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
