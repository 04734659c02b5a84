"""Which offloader a `BlockSwapConfig` gets (`create_offloader`), and the
reference's H2D-only offloader under its own name (`LoRAStreamOffloader`).

- `model_id` / `model_file`, or `h2d_only`: stream exactly `blocks_to_swap`
  blocks through blockswapd (the reference's LoRAStreamOffloader: frozen
  weights).
- Otherwise the reference's default is an exchange of `blocks_to_swap` = S
  blocks (its ModelOffloader, which the trainers also build directly).
  Trainable weights (a full fine-tune: they are this process's own) get that
  exchange, in this process. Frozen weights, with or without gradient
  checkpointing, stream through blockswapd instead, but a
  stream needs B ring slots on the device besides its resident blocks where an
  exchange needs none, so it streams S + B blocks (more when the daemon's
  tensor alignment makes a slot larger than a block, at most N): the device
  then holds no more weight bytes than the exchange's N - S blocks. Where
  even streaming every block would not fit, it exchanges.
The choice is made at the first prepare (ExchangeOrStream), when the trainer
has frozen what it does not train, and said once per process on stderr.
"""
import ctypes
import dataclasses
import sys

import torch

from . import _abi
from .exchange import ExchangeOffloader
from .offloader import BlockSwapConfig, StreamOffloader, _place_blocks
from .selection import base_modules

_said = set()


def _say_once(key, message):
    if key not in _said:
        _said.add(key)
        print(f"blockswap: {message}", file=sys.stderr, flush=True)


def exchange_selector(block):
    """What the exchange moves: the `weight` of every module that has one,
    adapters (peft's lora_A / lora_B ...) left out: a wrapper's base_layer
    holds its weight (selection.py)."""
    return [(module, "weight") for _, module in base_modules(block)
            if getattr(module, "weight", None) is not None]


def _nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def _block_layout_bytes(tensors):
    """The ring slot a block of `tensors` needs (the client library's layout)."""
    sizes = (ctypes.c_uint64 * max(1, len(tensors)))(*(_nbytes(t) for t in tensors))
    out = ctypes.c_uint64()
    _abi.check(_abi.library().bs_block_layout_bytes(sizes, len(tensors), ctypes.byref(out)),
               "the layout of a streaming block")
    return out.value


def streamed_blocks_within_exchange_memory(blocks, blocks_to_swap, ring_size, selector):
    """The fewest streaming blocks S' >= min(S + B, N) with which streaming the
    `selector`'s tensors holds no more weight bytes on the device than the
    exchange of `blocks_to_swap` = S blocks does at any time, or None when no
    S' <= N does. Both keep every other tensor on the device, so only the
    moved bytes count: the exchange's N - S resident blocks (the S blocks with
    the most weight bytes are off the device at best) against the stream's
    resident blocks plus B slots of the largest streaming block's layout."""
    num_blocks = len(blocks)
    exchanged = sorted((sum(_nbytes(getattr(m, a)) for m, a in exchange_selector(b))
                        for b in blocks), reverse=True)
    exchange_saves = sum(exchanged[:blocks_to_swap])
    selected = [[getattr(m, a) for m, a in selector(b)] for b in blocks]
    first = min(num_blocks, blocks_to_swap + min(ring_size, num_blocks))
    for count in range(first, num_blocks + 1):
        streaming, slots = _place_blocks(num_blocks, count, ring_size)
        slot_bytes = max(_block_layout_bytes(selected[i]) for i in streaming)
        stream_saves = sum(sum(_nbytes(t) for t in selected[i]) for i in streaming)
        if stream_saves - slots * slot_bytes >= exchange_saves:
            return count
    return None


def _exchange_reason(blocks, config):
    """Why these blocks cannot stream in place of the exchange (None: they can)."""
    for index, block in enumerate(blocks):
        for module, attr in exchange_selector(block):
            if attr not in module._parameters and attr not in module._buffers:
                return (f"block {index}'s {module.__class__.__name__}.weight is neither a "
                        f"parameter nor a buffer, so it cannot be bound to streamed memory")
            if getattr(module, attr).requires_grad:
                return ("trainable block weights (a full fine-tune): trained weights are this "
                        "process's own, so nothing is shared through blockswapd")
    return None


def _exchange(block_type, blocks, blocks_to_swap, config, reason):
    if blocks_to_swap > 0:
        _say_once(("exchange", reason),
                  f"{block_type}: exchanging {blocks_to_swap} of {len(blocks)} blocks between "
                  f"host and device in this process, as the reference's ModelOffloader does, "
                  f"because of {reason}")
    return ExchangeOffloader(blocks, blocks_to_swap, config.device,
                             supports_backward=config.supports_backward, debug=config.debug)


def _choose(block_type, blocks, blocks_to_swap, config):
    """The exchange or the stream for the reference's default, as the blocks are now."""
    num_blocks = len(blocks)
    if blocks_to_swap <= 0:
        return _exchange(block_type, blocks, blocks_to_swap, config, "nothing to swap")
    reason = _exchange_reason(blocks, config)
    if reason is not None:
        return _exchange(block_type, blocks, blocks_to_swap, config, reason)
    selector = config.swap_tensor_selector or exchange_selector
    streamed = streamed_blocks_within_exchange_memory(blocks, blocks_to_swap, config.ring_size,
                                                      selector)
    if streamed is None:
        return _exchange(block_type, blocks, blocks_to_swap, config,
                         f"the device memory: streaming even all {num_blocks} blocks through "
                         f"{config.ring_size} ring slots would hold more than the exchange's "
                         f"{num_blocks - blocks_to_swap} resident blocks")
    how = "for inference" if not config.supports_backward else \
        "with gradient checkpointing" if config.gradient_checkpointing else "for training"
    _say_once("stream", f"{block_type}: frozen weights {how}: streaming {streamed} of "
                        f"{num_blocks} blocks through blockswapd (ring of "
                        f"{min(config.ring_size, streamed)}) instead of exchanging "
                        f"{blocks_to_swap}, so that the device holds no more than the exchange's "
                        f"{num_blocks - blocks_to_swap} blocks")
    return StreamOffloader(block_type, blocks, num_blocks, streamed,
                           dataclasses.replace(config, swap_tensor_selector=selector))


class ExchangeOrStream:
    """The reference's default offloader (an exchange of `blocks_to_swap`
    blocks), which becomes the exchange or the stream at the first
    `prepare_block_devices_before_forward` (or wait / submit): trainers build
    the offloader before they freeze the base weights (and add adapters), so
    whether the weights are trainable is known only once training starts.
    `chosen` is the offloader then; every other attribute is its."""

    def __init__(self, block_type, blocks, blocks_to_swap, config):
        self.block_type = block_type
        self.num_blocks = len(blocks)
        self.blocks_to_swap = blocks_to_swap
        self.device = config.device
        self.supports_backward = config.supports_backward
        self.debug = config.debug
        self.chosen = None
        self._blocks = blocks
        self._config = config
        self._forward_only = not config.supports_backward

    def _choice(self):
        if self.chosen is None:
            self.chosen = _choose(self.block_type, self._blocks, self.blocks_to_swap,
                                  self._config)
            if self._forward_only != (not self.supports_backward):
                self.chosen.set_forward_only(self._forward_only)
        return self.chosen

    @property
    def forward_only(self):
        return self.chosen.forward_only if self.chosen is not None else self._forward_only

    def set_forward_only(self, forward_only):
        self._forward_only = bool(forward_only)
        if self.chosen is not None:
            self.chosen.set_forward_only(forward_only)

    def prepare_block_devices_before_forward(self, blocks=None):
        return self._choice().prepare_block_devices_before_forward(
            self._blocks if blocks is None else blocks)

    def wait_for_block(self, block_idx):
        return self._choice().wait_for_block(block_idx)

    def submit_move_blocks_forward(self, blocks, block_idx):
        return self._choice().submit_move_blocks_forward(blocks, block_idx)

    def stats(self):
        if self.chosen is None:
            return {"mode": None, "blocks_to_swap": self.blocks_to_swap, "forward": None,
                    "backward": None}
        return self.chosen.stats()

    def close(self):
        if isinstance(self.chosen, StreamOffloader):
            self.chosen.close()

    def __getattr__(self, name):
        chosen = self.__dict__.get("chosen")
        if chosen is None:
            raise AttributeError(f"{name!r}: the offloader is chosen (exchange or stream) at "
                                 f"the first prepare_block_devices_before_forward")
        return getattr(chosen, name)


def create_offloader(block_type, blocks, num_blocks, blocks_to_swap, config):
    """The offloader for one block list (the reference's signature); see the
    module's docstring for which one."""
    if len(blocks) != num_blocks:
        raise ValueError(f"num_blocks is {num_blocks} but {len(blocks)} blocks were given")
    if config.h2d_only or config.model_id or config.model_file:
        return StreamOffloader(block_type, blocks, num_blocks, blocks_to_swap, config)
    if blocks_to_swap <= 0:
        return _exchange(block_type, blocks, blocks_to_swap, config, "nothing to swap")
    if config.ring_size < 1:
        raise ValueError(f"ring_size must be >= 1 (got {config.ring_size})")
    return ExchangeOrStream(block_type, blocks, blocks_to_swap, config)


def _model_offloader_arguments(blocks, args, kwargs):
    """(blocks_to_swap, device, supports_backward, debug) from either of the
    signatures the trainers call, positional or keyword:
    sd-scripts' Flux and SD3 `(blocks, num_blocks, blocks_to_swap, device,
    debug=False)`, and `(blocks, blocks_to_swap, device, supports_backward=True,
    debug=False)`."""
    # The older one's third positional argument is the device, the newer
    # one's is supports_backward (a bool).
    older = ("num_blocks" in kwargs or
             (len(args) >= 3 and isinstance(args[1], int) and not isinstance(args[2], bool)) or
             (len(args) == 2 and "device" in kwargs and "blocks_to_swap" not in kwargs and
              isinstance(args[1], int)))
    names = (("num_blocks", "blocks_to_swap", "device", "debug") if older else
             ("blocks_to_swap", "device", "supports_backward", "debug"))
    signature = f"ModelOffloader(blocks, {', '.join(names)})"
    if len(args) > len(names):
        raise TypeError(f"{signature} takes at most {len(names)} arguments after blocks "
                        f"({len(args)} given)")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(f"{signature} got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{signature} got multiple values for argument {name!r}")
        values[name] = value
    for name in ("blocks_to_swap", "device"):
        if name not in values:
            raise TypeError(f"{signature} is missing the argument {name!r}")
    if older and values["num_blocks"] != len(blocks):
        raise ValueError(f"{signature}: num_blocks is {values['num_blocks']} but {len(blocks)} "
                         f"blocks were given")
    return (values["blocks_to_swap"], torch.device(values["device"]),
            bool(values.get("supports_backward", True)), bool(values.get("debug", False)))


class ModelOffloader(ExchangeOrStream):
    """The reference's `ModelOffloader` as the kohya trainers build it
    directly, in either signature (`_model_offloader_arguments`): the same
    choice as `create_offloader`'s default, at the first prepare. Frozen
    weights stream through blockswapd (S + B blocks, no more device bytes than
    the exchange), trainable ones are exchanged in this process. Every public
    name of sd-scripts' and musubi-tuner's class: `submit_move_blocks` is
    sd-scripts' name of `submit_move_blocks_forward`; the exchange's own
    attributes (`create_backward_hook`, `thread_pool`, ...) are there once it
    is chosen. blockswapd is found as `create_offloader` finds it
    ($BLOCKSWAP_SOCKET, the system socket, else the user's own)."""

    def __init__(self, blocks, *args, **kwargs):
        blocks_to_swap, device, supports_backward, debug = _model_offloader_arguments(
            blocks, args, kwargs)
        super().__init__("blocks", blocks, blocks_to_swap, BlockSwapConfig(
            device=device, supports_backward=supports_backward, debug=debug))

    def submit_move_blocks(self, blocks, block_idx):
        return self.submit_move_blocks_forward(blocks, block_idx)


class LoRAStreamOffloader(StreamOffloader):
    """The reference's H2D-only offloader (its signature): `blocks_to_swap`
    frozen blocks streamed through blockswapd ($BLOCKSWAP_SOCKET or the
    default socket). Unlike the reference's, training needs no gradient
    checkpointing (blockswap/saved_weights.py)."""

    def __init__(self, block_type, blocks, num_blocks, blocks_to_swap, supports_backward, device,
                 ring_size=2, use_pinned_memory=True, debug=False, swap_tensor_selector=None):
        super().__init__(block_type, blocks, num_blocks, blocks_to_swap, BlockSwapConfig(
            device=device, supports_backward=supports_backward,
            use_pinned_memory=use_pinned_memory, h2d_only=True, ring_size=ring_size, debug=debug,
            swap_tensor_selector=swap_tensor_selector))
