"""Torch tensors over memory the client library owns: ring slots and masters.

Host memory (the host backend's slots, every master) becomes a CPU tensor
through torch.frombuffer over a ctypes array at the address; device memory
(the cuda backend's slots) a CUDA tensor through __cuda_array_interface__.
Neither copies: the tensors alias the library's mappings and are valid only
while the ring or model that owns them is open.
"""
import ctypes

import torch

# torch dtype -> safetensors dtype (the names the model layout uses).
_SAFETENSORS_DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
    torch.int32: "I32", torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float32: "F32", torch.float64: "F64", torch.complex64: "C64",
}
for _name, _code in (("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64"),
                     ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                     ("float8_e4m3fnuz", "F8_E4M3FNUZ"), ("float8_e5m2fnuz", "F8_E5M2FNUZ"),
                     ("float8_e8m0fnu", "F8_E8M0")):
    if hasattr(torch, _name):  # newer torch versions only
        _SAFETENSORS_DTYPES[getattr(torch, _name)] = _code


def safetensors_dtype(dtype, what):
    try:
        return _SAFETENSORS_DTYPES[dtype]
    except KeyError:
        raise ValueError(f"{what} has dtype {dtype}, which blockswap cannot stream (supported: "
                         f"{', '.join(str(d) for d in _SAFETENSORS_DTYPES)})") from None


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
