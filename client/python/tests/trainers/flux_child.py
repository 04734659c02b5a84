"""A process serving the tiny Flux transformer through blockswap.diffusers:
prints "ready <model ids> <output checksum>", exits on "done" from stdin."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..")]

import torch  # noqa: E402

import blockswap  # noqa: E402
import blockswap.diffusers  # noqa: E402
from tiny_flux import inputs, tiny_flux  # noqa: E402


def main(socket):
    model = tiny_flux(lora=False)
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=False,
                                       socket=socket, h2d_only=True, ring_size=1)
    swap = blockswap.diffusers.attach(model, 2, config)
    with torch.no_grad():
        out = model(**inputs()).sample
    ids = ",".join(s["model_id"] for s in swap.stats().values())
    torch.save(out, sys.argv[2])
    print("ready", ids, flush=True)
    sys.stdin.readline()
    swap.close()


if __name__ == "__main__":
    main(sys.argv[1])
