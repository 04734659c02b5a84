"""The streaming offloader: frozen blocks through blockswapd (docs/client.md).

The frozen weights of S evenly placed "streaming" blocks live once per node, in
blockswapd's masters; a ring of B slots on the trainer's device holds the blocks
about to run. Which block goes into which slot and when (placement, prefetch
ahead in forward and behind in backward, self-heal, wrap-around in inference,
no-op rebinds) is decided by the client library's scheduler (bs_scheduler_*);
this module only turns its decisions into tensors: every binding it reports
rebinds the block's streamed tensors to views of the slot, and the block that
held the slot before back to views of its read-only master.
"""
import ctypes
import os
import warnings
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
    """The Python face of the C++ layer's CheckNotCapturing: blockswapd loads
    the streamed blocks and the wait for them is made on the host, which a
    captured CUDA graph cannot replay (under capture the event record and
    wait of the load protocol fail with a CUDA error that says nothing of it)."""
    # Without CUDA initialised in this process there is no capture to be in.
    if torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"blockswap: {what} during CUDA graph capture. Streamed blocks are loaded by "
            f"blockswapd and waited for on the host, which a captured graph cannot replay: "
            f"capture only the resident part of the model, or run the offloaded blocks "
            f"outside the graph")


def _place_blocks(num_blocks, blocks_to_swap, ring_size):
    """The scheduler's placement (bs_place_blocks), needed before the
    scheduler exists (to register the backward hooks): the streaming block
    indices, ascending, and the ring size after the clamp."""
    _fork.check("placing the streaming blocks")
    lib = _abi.library()
    count, slots = ctypes.c_uint32(0), ctypes.c_uint32(0)
    _abi.check(lib.bs_place_blocks(num_blocks, max(blocks_to_swap, 0), ring_size, None, 0,
                                   ctypes.byref(count), ctypes.byref(slots)),
               "placing the streaming blocks")
    streaming = (ctypes.c_uint32 * max(count.value, 1))()
    _abi.check(lib.bs_place_blocks(num_blocks, max(blocks_to_swap, 0), ring_size, streaming,
                                   count.value, ctypes.byref(count), ctypes.byref(slots)),
               "placing the streaming blocks")
    return list(streaming[:count.value]), slots.value


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
        if config.ring_size < 1:
            raise ValueError(f"ring_size must be >= 1 (got {config.ring_size})")
        if not 0 <= config.reconnect_timeout_s <= 3600:
            raise ValueError(f"reconnect_timeout_s must be within [0, 3600] seconds "
                             f"(got {config.reconnect_timeout_s})")
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
        self.stream_idx, self.B = _place_blocks(num_blocks, blocks_to_swap, config.ring_size)
        self.S = len(self.stream_idx)
        self.rank = {block: rank for rank, block in enumerate(self.stream_idx)}
        self.is_stream = [block in self.rank for block in range(num_blocks)]
        if config.model_id and config.model_file:
            raise ValueError("model_id and model_file are exclusive (the file's model has its "
                             "own id)")
        self._from_daemon = bool(config.model_id or config.model_file)
        self._every_block = False
        self._model_block = {}  # streaming block -> its block in the model
        # A model from the daemon may also fill resident blocks: select in all.
        self._jobs = {block: self._select(block) for block in
                      (range(num_blocks) if self._from_daemon else self.stream_idx)}
        self._check_frozen()

        self._lib = None
        self._client = None
        self._model = None
        self._ring = None
        self._scheduler = None
        self._bind_fn = None
        self._stream = None
        self._callback_error = None
        self._master_views = {}  # block -> [tensor or Parameter per job]
        self._slot_views = {}    # block -> the same over its ring slot
        self._slot_flat = []     # slot -> uint8 tensor over the slot
        self._slot_owner = []    # slot -> block bound to it (or None)
        self._slot_of_pointer = {}  # slot memory's address -> slot
        self._in_block = []      # (block, its SavedWeightHooks or None), innermost last
        self.remove_handles = []
        if self.S == 0:
            return
        self._lib = _abi.library()
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
            print(f"blockswap[{block_type}]: {self.S} streaming / {num_blocks} blocks, "
                  f"ring={self.B}, streaming indices: {self.stream_idx}")

    # ------------------------------------------------------------------ set-up

    def _select(self, block_idx):
        block = self._blocks[block_idx]
        names = {id(module): name for name, module in block.named_modules()}
        jobs = []
        for module, attr in self._selector(block):
            if id(module) not in names:
                raise ValueError(f"swap tensor selector returned a {module.__class__.__name__} "
                                 f"that is not part of {self.block_type} block {block_idx}")
            prefix = names[id(module)]
            where = (f"{prefix or '(the block itself)'} ({module.__class__.__name__}) of "
                     f"{self.block_type} block {block_idx}")
            if attr in module._parameters:
                is_param = True
            elif attr in module._buffers:
                is_param = False
            else:
                raise ValueError(
                    f"swap tensor selector returned {attr!r} of {where}, which is neither a "
                    f"parameter nor a registered buffer of it (an adapter wrapper's property? "
                    f"select the wrapped module's tensor, e.g. its base_layer.weight)")
            jobs.append(_Job(module, attr, is_param, f"{prefix}.{attr}" if prefix else attr))
        return jobs

    def _check_frozen(self):
        for block in self.stream_idx:
            for job in self._jobs[block]:
                tensor = getattr(job.module, job.attr)
                if job.is_param and tensor.requires_grad:
                    raise ValueError(
                        f"blockswap streams frozen tensors only, but the swap tensor selector "
                        f"returned {job.name} of {self.block_type} block {block}, which "
                        f"requires grad (it is trained). Leave it out of the selector (the "
                        f"default one streams frozen base weights only and skips adapters), or "
                        f"freeze it with requires_grad_(False) if it is not meant to train.")

    def _select_at_first_prepare(self):
        """The default selector chooses by requires_grad, which trainers set
        after building the offloader: select again, and refuse a streaming
        block left with nothing to stream."""
        if self._config.swap_tensor_selector is None:
            self._jobs = {block: self._select(block) for block in self._jobs}
        for block in self.stream_idx:
            if not self._jobs[block]:
                trained = trainable_linears(self._blocks[block])
                raise ValueError(
                    f"blockswap: {self.block_type} block {block} has no frozen tensor to stream"
                    + (f": its Linears {', '.join(trained)} require grad (a full fine-tune "
                       f"trains them in this process; leave h2d_only / model_id / model_file "
                       f"out to exchange blocks instead)" if trained else
                       " (the swap tensor selector returned nothing)"))

    def _connect(self):
        # None lets the C ABI resolve it (client/core/socket_path.h: $BLOCKSWAP_SOCKET, else
        # the system socket, else the private daemon), the one rule every binary follows; its
        # errors name the path.
        socket = self._config.socket
        where = socket or "$BLOCKSWAP_SOCKET or the default socket"
        name = self._config.client_name or f"python:{self.block_type}:{os.getpid()}"
        client = ctypes.c_void_p()
        _abi.check(self._lib.bs_connect(socket.encode() if socket else None, name.encode(),
                                        ctypes.byref(client)),
                   f"connecting to blockswapd at {where}")
        self._client = client
        backend = self._lib.bs_client_backend(client)
        uuids = [self._lib.bs_client_device_uuid(client, i).decode()
                 for i in range(self._lib.bs_client_device_count(client))]
        if backend == _abi.BS_BACKEND_HOST:
            if self.device.type != "cpu":
                raise ValueError(f"blockswapd at {where} runs the host "
                                 f"backend (devices {uuids}); it cannot stream to {self.device}. "
                                 f"Use device='cpu' or a blockswapd with the cuda backend.")
            self._device_uuid = uuids[0]
        else:
            if self.device.type != "cuda":
                raise ValueError(f"blockswapd runs the cuda backend (devices {uuids}); it streams "
                                 f"to cuda devices, not {self.device}")
            index = self.device.index if self.device.index is not None \
                else torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            # torch spells the UUID without nvidia-smi's "GPU-" prefix.
            uuid = str(torch.cuda.get_device_properties(index).uuid).lower()
            matches = [u for u in uuids if u.lower().removeprefix("gpu-") == uuid]
            if not matches:
                raise ValueError(f"{self.device} (GPU-{uuid}) is not one of the devices "
                                 f"blockswapd drives: {uuids}")
            self._device_uuid = matches[0]

    def _open_model(self):
        """Binds to the model of `model_id` / `model_file`: views of its masters,
        device copies for resident blocks when it has every block."""
        config, lib = self._config, self._lib
        model = ctypes.c_void_p()
        if config.model_file:
            options = _abi.FileOptions(config.model_block_pattern.encode(),
                                       (config.model_select or "").encode(),
                                       config.model_select_rank, None)
            # The library's message already says "registering FILE".
            _abi.check(lib.bs_model_register_file(self._client, config.model_file.encode(),
                                                  ctypes.byref(options), ctypes.byref(model),
                                                  None),
                       "BlockSwapConfig.model_file")
        else:
            _abi.check(lib.bs_model_open(self._client, config.model_id.encode(),
                                         ctypes.byref(model)),
                       f"opening model {config.model_id}")
        self._model = model
        have = lib.bs_model_block_count(model)
        if have not in (self.num_blocks, self.S):
            raise ValueError(f"model {self.model_id} has {have} blocks; {self.block_type} has "
                             f"{self.num_blocks} blocks of which {self.S} stream: the model must "
                             f"hold every block ({self.num_blocks}) or only the streaming ones "
                             f"({self.S}, in order)")
        self._every_block = have == self.num_blocks and self.S < self.num_blocks
        for rank, block in enumerate(self.stream_idx):
            self._model_block[block] = block if self._every_block else rank
            self._master_views[block] = self._views(self._model_block[block], block,
                                                    self._master(self._model_block[block]))
        for block in range(self.num_blocks) if self._every_block else ():
            if self.is_stream[block]:
                continue
            self._bind(block, [nn.Parameter(v.to(self.device, copy=True), requires_grad=False)
                               if job.is_param else v.to(self.device, copy=True)
                               for job, v in zip(self._jobs[block],
                                                 self._views(block, block, self._master(block)))])

    def _master(self, model_block):
        return host_bytes(self._lib.bs_model_master(self._model, model_block),
                          self._lib.bs_model_block_bytes(self._model, model_block))

    def _check_no_meta(self, block_idx):
        for name, tensor in [*self._blocks[block_idx].named_parameters(),
                             *self._blocks[block_idx].named_buffers()]:
            if tensor.is_meta:
                raise ValueError(
                    f"{name} of {self.block_type} block {block_idx} is a meta tensor (never "
                    f"materialised) that no model gives: only the selector's tensors are bound "
                    f"to blockswapd's model (set model_id or model_file; a model of every block "
                    f"feeds resident blocks too, one of only the streaming blocks does not)")

    def _register(self):
        """Uploads the streamed tensors (block r of the model = streaming rank r)
        and opens views of their masters."""
        if self._from_daemon:
            return self._open_model()
        keep = []  # the bytes must stay alive during bs_model_register
        descs = (_abi.BlockDesc * self.S)()
        for rank, block in enumerate(self.stream_idx):
            jobs = self._jobs[block]
            tensors = (_abi.TensorDesc * len(jobs))()
            for k, job in enumerate(jobs):
                t = getattr(job.module, job.attr).detach()
                what = f"{job.name} of {self.block_type} block {block}"
                if t.is_meta:
                    raise ValueError(f"{what} is a meta tensor (never materialised): set "
                                     f"BlockSwapConfig.model_id or model_file to bind it to a "
                                     f"model blockswapd holds")
                host = t.to("cpu").contiguous()
                shape = (ctypes.c_uint64 * max(1, host.dim()))(*host.shape)
                keep += [host, shape]
                tensors[k] = _abi.TensorDesc(job.name.encode(),
                                             safetensors_dtype(host.dtype, what).encode(),
                                             shape, host.dim(), host.data_ptr())
            keep.append(tensors)
            descs[rank] = _abi.BlockDesc(tensors, len(jobs))
        model = ctypes.c_void_p()
        _abi.check(self._lib.bs_model_register(self._client, self.block_type.encode(), descs,
                                               self.S, ctypes.byref(model)),
                   f"registering the {self.S} streaming blocks of {self.block_type}")
        self._model = model
        for rank, block in enumerate(self.stream_idx):
            self._model_block[block] = rank
            self._master_views[block] = self._views(rank, block, self._master(rank))

    def _layout(self, model_block, block):
        """Byte offset of each job's tensor in block `model_block` of the model
        (bs_model_match_block: the model's block holds exactly the jobs'
        tensors, with their dtypes and shapes)."""
        # Blocks this process uploaded keep their own names; a model from a file
        # (or opened by id) has the checkpoint's.
        to_model = (self._config.model_tensor_name or checkpoint_tensor_name) \
            if self._from_daemon else (lambda name: name)
        where = f"{self.block_type} block {block}"
        jobs = self._jobs[block]
        descs = (_abi.TensorDesc * max(1, len(jobs)))()
        keep = []  # the shapes must stay alive during the call
        for k, job in enumerate(jobs):
            tensor = getattr(job.module, job.attr)
            shape = (ctypes.c_uint64 * max(1, tensor.dim()))(*tensor.shape)
            keep.append(shape)
            descs[k] = _abi.TensorDesc(to_model(job.name).encode(),
                                       safetensors_dtype(tensor.dtype,
                                                         f"{job.name} of {where}").encode(),
                                       shape, tensor.dim(), None)
        offsets = (ctypes.c_uint64 * max(1, len(jobs)))()
        code = self._lib.bs_model_match_block(self._model, model_block, descs, len(jobs), offsets)
        if code:
            hint = ""
            if code == _abi.BS_NOT_FOUND:
                hint = "; BlockSwapConfig.model_tensor_name maps the names"
            elif code == _abi.BS_FAILED_PRECONDITION and not self._config.model_select:
                hint = ("; the file's blocks hold every tensor matching model_block_pattern "
                        "unless BlockSwapConfig.model_select picks the streamed ones, e.g. "
                        "model_select=r\"\\.weight$\", model_select_rank=2 for the Linears' "
                        "weights")
            message = self._lib.bs_last_error().decode(errors="replace")
            raise ValueError(f"{where}: {message}{hint}")
        return list(offsets[:len(jobs)])

    def _views(self, model_block, block, flat):
        views = []
        for job, offset in zip(self._jobs[block], self._layout(model_block, block)):
            template = getattr(job.module, job.attr)
            view = typed_view(flat, offset, template.dtype, template.shape)
            views.append(nn.Parameter(view, requires_grad=False) if job.is_param else view)
        return views

    def _create_ring(self):
        slot_bytes = max(self._lib.bs_model_block_bytes(self._model, self._model_block[b])
                         for b in self.stream_idx)
        ring = ctypes.c_void_p()
        _abi.check(self._lib.bs_ring_create(self._client, self._device_uuid.encode(), self.B,
                                            slot_bytes, ctypes.byref(ring)),
                   f"creating a ring of {self.B} slots of {slot_bytes} bytes on "
                   f"{self._device_uuid}")
        self._ring = ring
        self._slot_bytes = slot_bytes
        self._slot_owner = [None] * self.B
        self._map_slots()

    def _map_slots(self):
        """Tensors over the ring's slots as the library has them now (a ring
        re-created after a daemon restart has new memory)."""
        self._slot_flat = [device_bytes(self._lib.bs_ring_slot(self._ring, s), self._slot_bytes,
                                        self.device) for s in range(self.B)]
        self._slot_of_pointer = {flat.untyped_storage().data_ptr(): s
                                 for s, flat in enumerate(self._slot_flat)}
        for rank, block in enumerate(self.stream_idx):
            self._slot_views[block] = self._views(self._model_block[block], block,
                                                  self._slot_flat[rank % self.B])

    def _create_scheduler(self):
        config = _abi.SchedulerConfig(self.num_blocks, self.blocks_to_swap, self._config.ring_size,
                                      int(self.forward_only), int(self._every_block))
        if self.device.type == "cuda":
            self._stream = torch.cuda.current_stream(self.device)
            handle = ctypes.c_void_p(self._stream.cuda_stream)
        else:
            handle = None
        self._bind_fn = _abi.BIND_FN(self._on_bind)
        scheduler = ctypes.c_void_p()
        _abi.check(self._lib.bs_scheduler_create(self._client, self._ring, self._model,
                                                 ctypes.byref(config), handle, self._bind_fn,
                                                 None, ctypes.byref(scheduler)),
                   "creating the stream scheduler")
        self._scheduler = scheduler
        _abi.check(self._lib.bs_scheduler_set_reconnect_timeout(
            scheduler, int(self._config.reconnect_timeout_s * 1000)), "setting the reconnect timeout")
        placed = [self._lib.bs_scheduler_streaming_block(scheduler, r)
                  for r in range(self._lib.bs_scheduler_streaming_count(scheduler))]
        if placed != self.stream_idx or self._lib.bs_scheduler_ring_slots(scheduler) != self.B:
            raise RuntimeError(f"blockswap: the scheduler placed {placed} with "
                               f"{self._lib.bs_scheduler_ring_slots(scheduler)} slots, this "
                               f"package expected {self.stream_idx} with {self.B}: the package "
                               f"and libblockswap.so do not match")

    def _first_prepare(self):
        self._select_at_first_prepare()
        self._check_frozen()  # again: the trainer may have changed its mind since
        self._register()
        for i, block in enumerate(self._blocks):
            if not self.is_stream[i]:
                self._check_no_meta(i)
                block.to(self.device)
                continue
            # Detach the streamed tensors so that moving the rest of the block
            # to the device neither copies them nor moves their masters.
            for job in self._jobs[i]:
                current = getattr(job.module, job.attr)
                empty = torch.empty(0, dtype=current.dtype)
                setattr(job.module, job.attr,
                        nn.Parameter(empty, requires_grad=False) if job.is_param else empty)
            self._check_no_meta(i)
            block.to(self.device)
            self._bind(i, self._master_views[i])
        self._create_ring()
        self._create_scheduler()

    # ------------------------------------------------------------------ bindings

    def _bind(self, block, tensors):
        for job, tensor in zip(self._jobs[block], tensors):
            setattr(job.module, job.attr, tensor)

    def _on_bind(self, _user_data, block, slot, loaded):
        # Runs inside a scheduler call (on the caller's thread); an exception
        # cannot cross the C ABI, so it is kept and raised when the call returns.
        try:
            if self._lib.bs_ring_slot(self._ring, slot) != self._slot_flat[slot].data_ptr():
                # The scheduler re-created its ring (it re-attached after losing
                # blockswapd) and reloads every slot: bind to the new memory.
                self._map_slots()
            previous = self._slot_owner[slot]
            if previous is not None and previous != block:
                self._bind(previous, self._master_views[previous])  # eviction is free
            self._bind(block, self._slot_views[block])
            self._slot_owner[slot] = block
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
        if self.device.type == "cuda":
            current = torch.cuda.current_stream(self.device)
            if current != self._stream:
                raise RuntimeError(
                    f"blockswap orders its loads against the CUDA stream that was current at the "
                    f"first prepare ({self._stream}), but {what} runs on {current}: run the "
                    f"blocks on one stream, or prepare under the stream they run on")
        code = function(self._scheduler, *args)
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
        if self._scheduler is None:
            self._first_prepare()
        self._call(self._lib.bs_scheduler_prepare, what="prepare_block_devices_before_forward")

    def wait_for_block(self, block_idx):
        if self.S == 0 or not self.is_stream[block_idx]:
            return
        _fork.check("wait_for_block")
        self._require_prepared("wait_for_block")
        self._call(self._lib.bs_scheduler_wait_for_block, block_idx,
                   what=f"wait_for_block({block_idx})")

    def submit_move_blocks_forward(self, blocks, block_idx):
        if self.S == 0 or not self.is_stream[block_idx]:
            return
        _fork.check("submit_move_blocks_forward")
        self._require_prepared("submit_move_blocks_forward")
        self._call(self._lib.bs_scheduler_after_forward, block_idx,
                   what=f"submit_move_blocks_forward({block_idx})")

    def set_forward_only(self, forward_only):
        self.forward_only = bool(forward_only)
        if self._scheduler is not None:
            self._call(self._lib.bs_scheduler_set_forward_only, int(self.forward_only),
                       what="set_forward_only")

    def _require_prepared(self, what):
        if self._scheduler is None:
            raise RuntimeError(f"blockswap: {what} before prepare_block_devices_before_forward: "
                               f"call offloader.prepare_block_devices_before_forward(blocks) "
                               f"before the first forward pass")

    def _before_block(self, block_idx):
        def hook(module, args, kwargs):
            if self.forward_only or not torch.is_grad_enabled() or self._scheduler is None:
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
        if self._scheduler is not None:
            self._call(self._lib.bs_scheduler_after_backward, block_idx,
                       what=f"the backward of block {block_idx}")

    # ------------------------------------------------------------------ saved weights
    # What SavedWeightHooks asks of the ring.

    def slot_of_storage(self, pointer):
        return self._slot_of_pointer.get(pointer)

    def slot_owner(self, slot):
        return self._slot_owner[slot]

    def streamed_tensors(self, block_idx):
        return [getattr(job.module, job.attr) for job in self._jobs[block_idx]]

    def streamed_modules(self, block_idx):
        return [job.module for job in self._jobs[block_idx]]

    def slot_memory(self, block_idx):
        """The uint8 tensor over the slot of `block_idx`, which holds it (loaded
        on demand, a self-heal, when it does not)."""
        slot = self.rank[block_idx] % self.B
        if self._slot_owner[slot] != block_idx:
            self._call(self._lib.bs_scheduler_ensure_block, block_idx,
                       what=f"bringing block {block_idx} back for its backward")
        return self._slot_flat[slot]

    # ------------------------------------------------------------------ introspection

    @property
    def model_id(self):
        _fork.check("model_id")
        return self._lib.bs_model_id(self._model).decode() if self._model else None

    def slot_address_ranges(self):
        """[(start, end)] of each ring slot's memory, for checks that a tensor lives there."""
        return [(flat.data_ptr(), flat.data_ptr() + self._slot_bytes) for flat in self._slot_flat]

    def master_address_ranges(self):
        """[(start, end)] of each streaming block's master (host memory of the
        daemon's one copy), for checks that a tensor is off the device."""
        if self._model is None:
            return []
        ranges = []
        for block in self.stream_idx:
            model_block = self._model_block[block]
            start = self._lib.bs_model_master(self._model, model_block)
            ranges.append((start, start + self._lib.bs_model_block_bytes(self._model, model_block)))
        return ranges

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
        if self._scheduler is None:
            return result
        if finish_pass:
            self._call(self._lib.bs_scheduler_finish_pass, what="stats")
        for key, direction in (("forward", _abi.BS_FORWARD), ("backward", _abi.BS_BACKWARD)):
            out = _abi.PassStats()
            if self._lib.bs_scheduler_last_pass(self._scheduler, direction, ctypes.byref(out)):
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
        if _fork.in_forked_child():
            # The handles are the parent's: destroying them here would end its
            # session. The child's copies of the mappings go when it exits.
            self._scheduler = self._ring = self._model = self._client = self._lib = None
            return
        for block, views in self._master_views.items():
            copies = [v.detach().to(self.device, copy=True) for v in views]
            self._bind(block, [nn.Parameter(c, requires_grad=False) if isinstance(v, nn.Parameter)
                               else c for v, c in zip(views, copies)])
        self._master_views, self._slot_views, self._slot_flat = {}, {}, []
        if self._scheduler:
            scheduler, self._scheduler = self._scheduler, None
            lib.bs_scheduler_destroy(scheduler)
        if self._ring:
            # CUDA's order: the releases recorded after the stream's last use
            # of the slots, the stream synchronised, the imports closed, and
            # only then the ring freed by the daemon (bs_ring_close). An error
            # here cannot be acted on: the ring is closed all the same.
            stream = ctypes.c_void_p(self._stream.cuda_stream) if self._stream is not None else None
            lib.bs_ring_close(self._ring, stream, _CLOSE_TIMEOUT_MS)
        for attr, destroy in (("_ring", lib.bs_ring_destroy), ("_model", lib.bs_model_close),
                              ("_client", lib.bs_disconnect)):
            handle = getattr(self, attr)
            if handle:
                setattr(self, attr, None)
                destroy(handle)
        self._lib = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
