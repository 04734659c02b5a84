"""One training run without gradient checkpointing, for test_saved_weights'
memory comparison:

  memory_child.py resident|streamed OUT

prints nothing; saves the process's peak resident memory over the training
steps (VmHWM, reset once the model is set up and its first step ran) and,
for the streamed run, how many bytes of streamed weights the process held
besides the daemon's masters and its ring slots."""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

import torch  # noqa: E402

import blockswap  # noqa: E402
from blockswap import _abi, saved_weights  # noqa: E402
from tiny_transformer import TinyTransformer, batches, train  # noqa: E402

DIM = 512  # 12 MiB of frozen weights per block


def vm(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def main(mode, out):
    _abi.library()  # both runs carry the client library
    data = batches(3, dim=DIM)
    model = TinyTransformer(6, dim=DIM)
    model.gradient_checkpointing = False
    if mode == "streamed":
        model.offloader = blockswap.LoRAStreamOffloader("blocks", model.blocks, 6, 4, True,
                                                        torch.device("cpu"))
    train(model, data[:1])  # set-up: the upload, the ring, the first step
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what set-up freed goes back in both runs
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS
    held = []

    def pack(tensor):
        held.append(tensor)
        return tensor
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        train(model, data[1:])
    result = {"peak": vm("VmHWM")}
    if mode == "streamed":
        offloader = model.offloader
        ranges = offloader.slot_address_ranges() + offloader.master_address_ranges()
        weights = [w for b in offloader.stream_idx for w in offloader.streamed_tensors(b)]
        outside = [w for w in weights if not any(
            start <= w.untyped_storage().data_ptr() < end for start, end in ranges)]
        saved = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held
                 if any(start <= t.untyped_storage().data_ptr() < end for start, end in ranges)
                 or any(saved_weights.recipe_of(t, w, None) is not None for w in weights)}
        result["weights_outside"] = sum(w.numel() * w.element_size() for w in outside)
        result["saved_weight_bytes"] = sum(saved.values())
        offloader.close()
    torch.save(result, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
