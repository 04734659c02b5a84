"""blockswap for PyTorch trainers: a drop-in for the reference offloader's
`create_offloader`, streaming frozen blocks through the node's blockswapd.

    import blockswap
    config = blockswap.BlockSwapConfig(device=torch.device("cuda"), supports_backward=True,
                                       gradient_checkpointing=True)
    offloader = blockswap.create_offloader("blocks", blocks, len(blocks), 8, config)

See README.md, "Use from a PyTorch trainer".
"""
from ._abi import BlockSwapError, library_path
from .offloader import (BlockSwapConfig, StreamOffloader, create_offloader,
                        default_swap_tensor_selector)

__all__ = ["BlockSwapConfig", "BlockSwapError", "StreamOffloader", "create_offloader",
           "default_swap_tensor_selector", "library_path"]
__version__ = "0.1.0"
