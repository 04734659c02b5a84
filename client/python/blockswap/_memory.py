"""Torch tensors over memory the client library owns: ring slots and masters.

Host memory (the host backend's slots, every master) becomes a CPU tensor
through torch.frombuffer over a ctypes array at the address; device memory
(the cuda backend's slots) a CUDA tensor through __cuda_array_interface__.
Neither copies: the tensors alias the library's mappings and are valid only
while the ring or model that owns them is open.
"""
import ctypes

import torch

from . import _abi


def safetensors_dtype(dtype, what):
    """The safetensors name of torch `dtype` (the client library's table,
    bs_dtype_of_torch); ValueError naming `what` for one blockswap cannot stream."""
    lib = _abi.library()
    name = lib.bs_dtype_of_torch(str(dtype).removeprefix("torch.").encode())
    if name is None:
        raise ValueError(f"{what}: {lib.bs_last_error().decode(errors='replace')}")
    return name.decode()


def host_bytes(address, nbytes):
    """A uint8 CPU tensor over `nbytes` of host memory at `address`."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    array = (ctypes.c_uint8 * nbytes).from_address(address)
    return torch.frombuffer(array, dtype=torch.uint8)  # keeps `array` alive


class _CudaBytes:
    """Describes device memory to torch (the CUDA Array Interface, version 2:
    no stream, so torch synchronises nothing)."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 2}


def device_bytes(address, nbytes, device):
    """A uint8 tensor over `nbytes` of ring-slot memory at `address` on `device`."""
    if device.type == "cpu":
        return host_bytes(address, nbytes)
    if device.type != "cuda":
        raise ValueError(f"blockswap streams to cpu (host backend) or cuda devices, not {device}")
    with torch.cuda.device(device):
        return torch.as_tensor(_CudaBytes(address, nbytes), device=device)


def typed_view(flat, offset, dtype, shape):
    """The tensor of `dtype` and `shape` at byte `offset` of the uint8 tensor `flat`."""
    nbytes = torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size()
    return flat[offset:offset + nbytes].view(dtype).view(shape)
