"""The reference's exchange offloader (`Offloader`, `ExchangeOffloader`) and its
weight-moving helpers, in the trainer's process.

An exchange keeps N - S blocks' weights on the device. After block i of the
forward pass ran, its weights go to the host and those of block N - S + i
come in, into the device memory block i's weights just left (the swap is in
place: the Parameter objects stay the same, only their `.data` changes, so
trainable weights, their gradients and the optimizer's references survive).
Backward hooks swap the same pairs back in reverse, so that the blocks are
where prepare put them when the next step starts. Nothing goes through
blockswapd: trained weights change every step and are this process's own.

Works with or without gradient checkpointing and for any weight that has a
`.data` (what `create_offloader` and the trainers' `ModelOffloader` route here
when streaming does not fit: trainable weights, or too little device memory).
"""
import time
from concurrent.futures import ThreadPoolExecutor

import torch


def synchronize_device(device):
    """Waits for every queued kernel of `device`'s kind (cuda, xpu, mps)."""
    backend = {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None),
               "mps": getattr(torch, "mps", None)}.get(device.type)
    if backend is not None:
        backend.synchronize()


def clean_memory_on_device(device):
    """Collects garbage and returns the device's cached free memory to it."""
    import gc
    gc.collect()
    backend = {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None),
               "mps": getattr(torch, "mps", None)}.get(device.type)
    if backend is not None:
        backend.empty_cache()


def _has_weight(module):
    return hasattr(module, "weight") and module.weight is not None


def _exchange_pairs(device, layer_out, layer_in, move_unmatched):
    """(module leaving, module arriving) for every weighted module of
    `layer_in` whose namesake in `layer_out` has a weight of the same shape:
    the arriving weight will take over the leaving one's device memory. A
    weight without such a partner is moved to `device` on its own when
    `move_unmatched` (it cannot reuse anything)."""
    if layer_out.__class__ is not layer_in.__class__:
        raise TypeError(f"blocks of different classes cannot exchange weights: "
                        f"{layer_out.__class__.__name__} and {layer_in.__class__.__name__}")
    leaving = dict(layer_out.named_modules())
    pairs = []
    for name, arriving in layer_in.named_modules():
        if not _has_weight(arriving):
            continue
        partner = leaving.get(name)
        if partner is not None and _has_weight(partner) and \
                partner.weight.shape == arriving.weight.shape:
            pairs.append((partner, arriving))
        elif move_unmatched and arriving.weight.device.type != device.type:
            arriving.weight.data = arriving.weight.data.to(device)
    return pairs


def _exchange(pairs, to_host, synchronize):
    # First every leaving weight gets a host copy of its own; only then may the
    # arriving weights overwrite the device memory the leaving ones vacate.
    vacated = []
    for leaving, arriving in pairs:
        memory = leaving.weight.data
        leaving.weight.data = to_host(memory)
        vacated.append((memory, arriving))
    synchronize()
    for memory, arriving in vacated:
        memory.copy_(arriving.weight.data, non_blocking=True)
        arriving.weight.data = memory
    synchronize()


def swap_weight_devices_cuda(device, layer_to_cpu, layer_to_cuda):
    """Exchanges the weights of two blocks of one class on a CUDA device:
    `layer_to_cpu`'s go to the host, `layer_to_cuda`'s into the device memory
    they leave. Weights are paired by module name (and shape); an unpaired
    weight of `layer_to_cuda` is moved to the device by itself. Returns with
    every copy done, on a side stream ordered after the current one."""
    pairs = _exchange_pairs(device, layer_to_cpu, layer_to_cuda, move_unmatched=True)
    torch.cuda.current_stream().synchronize()  # the leaving weights' last reads are done
    side = torch.cuda.Stream(device=device)

    def to_host(memory):
        memory.record_stream(side)  # the caching allocator must wait for the side stream
        return memory.to("cpu", non_blocking=True)

    with torch.cuda.stream(side):
        _exchange(pairs, to_host, side.synchronize)
    torch.cuda.current_stream().synchronize()


def swap_weight_devices_no_cuda(device, layer_to_cpu, layer_to_cuda):
    """The same exchange on a device that is not CUDA (cpu, xpu, mps), ordered
    by synchronizing the device. On the CPU the "host copy" is a new tensor, so
    the arriving weights never overwrite memory that the leaving ones keep."""
    pairs = _exchange_pairs(device, layer_to_cpu, layer_to_cuda, move_unmatched=False)
    _exchange(pairs, lambda memory: memory.to("cpu", non_blocking=True, copy=True),
              lambda: synchronize_device(device))


def weighs_to_device(layer, device):
    """Moves the `.weight` of every module of `layer` to `device` (the
    reference's spelling), keeping the Parameter objects."""
    for module in layer.modules():
        if _has_weight(module):
            module.weight.data = module.weight.data.to(device, non_blocking=True)


class Offloader:
    """Block exchanges on one worker thread, awaited by the index of the block
    that comes in.

    Statistics (`stats()`): per direction, how many exchanges were submitted
    and awaited, and how long the training thread waited for them."""

    def __init__(self, num_blocks, blocks_to_swap, device, debug=False):
        self.num_blocks = num_blocks
        self.blocks_to_swap = blocks_to_swap
        self.device = torch.device(device)
        self.debug = debug
        self.thread_pool = ThreadPoolExecutor(max_workers=1)
        self.futures = {}  # index of the block coming in -> its exchange
        self.cuda_available = self.device.type == "cuda"
        self._direction = "forward"
        self._counts = {d: {"swaps": 0, "waits": 0, "host_wait_seconds": 0.0}
                        for d in ("forward", "backward")}

    def swap_weight_devices(self, block_to_cpu, block_to_cuda):
        exchange = swap_weight_devices_cuda if self.cuda_available else swap_weight_devices_no_cuda
        exchange(self.device, block_to_cpu, block_to_cuda)

    def _submit_move_blocks(self, blocks, block_idx_to_cpu, block_idx_to_cuda):
        def move():
            started = time.perf_counter()
            self.swap_weight_devices(blocks[block_idx_to_cpu], blocks[block_idx_to_cuda])
            if self.debug:
                print(f"blockswap exchange: block {block_idx_to_cpu} out, block "
                      f"{block_idx_to_cuda} in, {time.perf_counter() - started:.3f} s")
            return block_idx_to_cpu, block_idx_to_cuda

        self._counts[self._direction]["swaps"] += 1
        self.futures[block_idx_to_cuda] = self.thread_pool.submit(move)

    def _wait_blocks_move(self, block_idx):
        future = self.futures.pop(block_idx, None)
        if future is None:
            return
        started = time.perf_counter()
        _, arrived = future.result()  # re-raises what the exchange raised
        waited = time.perf_counter() - started
        if arrived != block_idx:
            raise RuntimeError(f"blockswap exchange: waited for block {block_idx}, but the "
                               f"exchange brought in block {arrived}")
        counts = self._counts[self._direction]
        counts["waits"] += 1
        counts["host_wait_seconds"] += waited
        if self.debug:
            print(f"blockswap exchange: waited {waited:.3f} s for block {block_idx}")

    def _wait_all(self):
        for block_idx in list(self.futures):
            self._wait_blocks_move(block_idx)

    def stats(self):
        """Exchanges submitted and awaited since construction, per direction."""
        return {"mode": "exchange", "blocks_to_swap": self.blocks_to_swap,
                "forward": dict(self._counts["forward"]),
                "backward": dict(self._counts["backward"])}


class ExchangeOffloader(Offloader):
    """The reference's exchange offloader (its ModelOffloader) over a list of blocks.

    Training (`supports_backward`): in forward, blocks 0..S-1 leave after they
    ran and blocks N-S..N-1 come in; full backward hooks bring them back in
    reverse. Inference (`set_forward_only(True)`): every block leaves after it
    ran and the one N-S ahead (cyclically) comes in, so each pass leaves the
    layout as prepare made it. The trainers' `ModelOffloader` (routing.py)
    becomes this where streaming cannot serve.
    """

    def __init__(self, blocks, blocks_to_swap, device, supports_backward=True, debug=False):
        super().__init__(len(blocks), blocks_to_swap, device, debug)
        self.supports_backward = supports_backward
        self.forward_only = not supports_backward
        self.remove_handles = []
        if supports_backward:
            for index, block in enumerate(blocks):
                hook = self.create_backward_hook(blocks, index)
                if hook is not None:
                    self.remove_handles.append(block.register_full_backward_hook(hook))

    def set_forward_only(self, forward_only):
        self._wait_all()  # an exchange in flight belongs to the old schedule
        self.forward_only = forward_only

    def __del__(self):
        for handle in getattr(self, "remove_handles", []):
            handle.remove()

    def create_backward_hook(self, blocks, block_index):
        """The hook for block `block_index`, or None where it has nothing to do.

        When backward reaches block b, the N-1-b blocks after it are done. For
        the first S of those (0 < N-1-b <= S) block b+1 leaves and block
        S-(N-1-b) comes in: forward's exchanges, undone in reverse. Block b-1
        runs next; for b in 1..S it is one that left in forward: wait for it."""
        behind = self.num_blocks - block_index - 1
        swaps = 0 < behind <= self.blocks_to_swap
        waits = 0 < block_index <= self.blocks_to_swap
        if not swaps and not waits:
            return None
        leaving, arriving = block_index + 1, self.blocks_to_swap - behind

        def backward_hook(module, grad_input, grad_output):
            self._direction = "backward"
            try:
                if swaps:
                    self._submit_move_blocks(blocks, leaving, arriving)
                if waits:
                    self._wait_blocks_move(block_index - 1)
            finally:
                self._direction = "forward"
            return None

        return backward_hook

    def _swapping(self):
        return bool(self.blocks_to_swap)

    def prepare_block_devices_before_forward(self, blocks):
        """Blocks 0..N-S-1 wholly on the device; the others' buffers and
        non-weight parameters on the device, their weights on the host."""
        if not self._swapping():
            return
        self._wait_all()
        resident = self.num_blocks - self.blocks_to_swap
        cpu = torch.device("cpu")
        for index, block in enumerate(blocks):
            block.to(self.device)
            weighs_to_device(block, self.device if index < resident else cpu)
        synchronize_device(self.device)
        clean_memory_on_device(self.device)

    def wait_for_block(self, block_idx):
        if self._swapping():
            self._wait_blocks_move(block_idx)

    def submit_move_blocks_forward(self, blocks, block_idx):
        if not self._swapping():
            return
        if not self.forward_only and block_idx >= self.blocks_to_swap:
            return  # in training, the rest stays for backward
        arriving = (self.num_blocks - self.blocks_to_swap + block_idx) % self.num_blocks
        self._submit_move_blocks(blocks, block_idx, arriving)

