"""blockswap for PyTorch trainers: the reference's `custom_offloading_utils`
(every public name, `blockswap.custom_offloading_utils`), streaming frozen
blocks through the node's blockswapd and exchanging trainable ones in-process.

    import blockswap
    config = blockswap.BlockSwapConfig(device=torch.device("cuda"), supports_backward=True,
                                       gradient_checkpointing=True)
    offloader = blockswap.create_offloader("blocks", blocks, len(blocks), 8, config)

Trainers that import their own `custom_offloading_utils` run unmodified with
`python -m blockswap.kohya SCRIPT ARGS...`. See README.md, "Use from a PyTorch trainer".
"""
from ._abi import BlockSwapError, library_path
from .offloader import BlockSwapConfig, StreamOffloader, default_swap_tensor_selector
from .routing import LoRAStreamOffloader, ModelOffloader, create_offloader

__all__ = ["BlockSwapConfig", "BlockSwapError", "LoRAStreamOffloader", "ModelOffloader",
           "StreamOffloader", "create_offloader", "default_swap_tensor_selector",
           "library_path"]


def __getattr__(name):
    # The version is CMake's project version, written into _version.py when the
    # package is bundled (make_bundle.sh, deploy/build-wheel.sh); the source tree
    # has none, so asking a source checkout for it is an error, not a guess.
    if name == "__version__":
        try:
            from ._version import __version__
        except ImportError:
            raise AttributeError(
                "blockswap.__version__: this copy of the package was not built (no "
                "blockswap/_version.py); install the wheel (deploy/build-wheel.sh)") from None
        return __version__
    raise AttributeError(f"module 'blockswap' has no attribute '{name}'")
