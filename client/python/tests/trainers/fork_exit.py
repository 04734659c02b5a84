"""Streams a training step, forks twice; each child drops the inherited
offloader and exits normally (Python's finalization, the library's exit
handlers); the parent then trains on. Prints "child CODE c_abi_child CODE
equal BOOL clients N".

The second child first switches blockswap/_fork.py's guard off, so that its
call and the offloader's teardown reach the C ABI, which must refuse the
call itself (exit 3 if not) and forget the handles without an RPC (a child
that hangs there is killed by the test's timeout)."""
import gc
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, ".."), os.path.join(HERE, "..", "..")]

import torch  # noqa: E402

import blockswap  # noqa: E402
from tiny_transformer import TinyTransformer, batches, train  # noqa: E402


def main(socket, bin_dir):
    data = batches(2)
    expected = train(TinyTransformer(6), data)
    model = TinyTransformer(6)
    config = blockswap.BlockSwapConfig(device=torch.device("cpu"), supports_backward=True,
                                       socket=socket, h2d_only=True, gradient_checkpointing=True)
    model.offloader = blockswap.create_offloader("blocks", model.blocks, 6, 4, config)
    first = train(model, data[:1])
    pid = os.fork()
    if pid == 0:
        model.offloader = None
        gc.collect()
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    pid = os.fork()
    if pid == 0:
        from blockswap import _fork
        _fork._forked_from = None  # as if the library had no Python guard
        try:
            model.offloader.prepare_block_devices_before_forward()
            sys.exit(3)
        except blockswap.BlockSwapError as error:
            if error.code != 9 or f"was forked from pid {os.getppid()}" not in str(error):
                print(error, file=sys.stderr)
                sys.exit(3)
        model.offloader = None
        gc.collect()
        sys.exit(0)
    _, c_abi_status = os.waitpid(pid, 0)
    later = train(model, data[1:])
    equal = all(torch.equal(a, b) for a, b in zip(first[0] + later[0], expected[0]))
    stats = model.offloader.stats()  # the session still answers
    clients = json.loads(subprocess.run(
        [os.path.join(bin_dir, "blockswapctl"), "--socket", socket,
         "--json", "clients"], capture_output=True, text=True, check=True).stdout)["clients"]
    assert stats["backward"]["loads"] > 0
    print("child", os.waitstatus_to_exitcode(status), "c_abi_child",
          os.waitstatus_to_exitcode(c_abi_status), "equal", equal, "clients",
          len([c for c in clients if c["pid"] == os.getpid()]))
    model.offloader.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
