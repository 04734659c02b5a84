"""The client library's C ABI (client/include/blockswap/blockswap.h) through ctypes.

ABI mode only: nothing is compiled, so one package serves every Python and torch
version. `ctypes.CDLL` releases the GIL around every foreign call, so a blocking
wait (bs_scheduler_wait_for_block, bs_ring_wait) never stalls other Python threads;
the bind callback re-acquires it while it runs.

The library is found, in order, at
  1. $BLOCKSWAP_LIBRARY (a path to libblockswap.so),
  2. blockswap/_lib/libblockswap.so.1 inside this package (the bundle built by
     `cmake --build build --target blockswap_python_bundle`, with its gRPC,
     protobuf and abseil libraries beside it and an $ORIGIN rpath),
  3. the system's library path (libblockswap.so.1, e.g. after `cmake --install`).
"""
import ctypes
import os
import threading

ABI_VERSION = 1
LIBRARY_ENV = "BLOCKSWAP_LIBRARY"
_SONAME = "libblockswap.so.1"
_BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", _SONAME)

BS_BACKEND_HOST = 1
BS_BACKEND_CUDA = 2
BS_FORWARD = 1
BS_BACKWARD = 2
BS_INVALID_ARGUMENT = 3

# google.rpc.Code names, for messages.
_CODE_NAMES = {
    1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class BlockSwapError(RuntimeError):
    """A call into the client library failed; `code` is the google.rpc.Code."""

    def __init__(self, code, message):
        self.code = code
        self.code_name = _CODE_NAMES.get(code, str(code))
        super().__init__(f"{message} ({self.code_name})")


class OffloaderConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_char_p), ("num_blocks", ctypes.c_uint32),
                ("blocks_to_swap", ctypes.c_uint32), ("ring_size", ctypes.c_uint32),
                ("forward_only", ctypes.c_int), ("socket_path", ctypes.c_char_p),
                ("client_name", ctypes.c_char_p), ("model_id", ctypes.c_char_p),
                ("model_file", ctypes.c_char_p), ("model_block_pattern", ctypes.c_char_p),
                ("model_select", ctypes.c_char_p), ("model_select_rank", ctypes.c_uint32),
                ("model_name", ctypes.c_char_p), ("reconnect_timeout_s", ctypes.c_double),
                ("name_hint", ctypes.c_char_p)]


class OffloaderTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("shape", ctypes.POINTER(ctypes.c_uint64)), ("ndim", ctypes.c_uint32),
                ("data", ctypes.c_void_p), ("requires_grad", ctypes.c_int),
                ("is_meta", ctypes.c_int)]


class OffloaderBlock(ctypes.Structure):
    _fields_ = [("tensors", ctypes.POINTER(OffloaderTensor)), ("tensor_count", ctypes.c_uint32)]


class PassStats(ctypes.Structure):
    """bs_pass_stats: stall_seconds is the compute stream's idle time at the
    pass's waits (time lost), host_wait_seconds the thread's blocking time."""
    _fields_ = [("direction", ctypes.c_int),
                ("stall_seconds", ctypes.c_double), ("host_wait_seconds", ctypes.c_double),
                ("copy_seconds", ctypes.c_double), ("waits", ctypes.c_uint64),
                ("not_ready_waits", ctypes.c_uint64), ("self_heals", ctypes.c_uint64),
                ("loads", ctypes.c_uint64), ("rebinds", ctypes.c_uint64)]


BIND_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                           ctypes.c_uint32, ctypes.c_int)
NONE = 0xFFFFFFFF  # no block, no slot

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_U32 = ctypes.c_uint32
_U64 = ctypes.c_uint64
_INT = ctypes.c_int
_STR = ctypes.c_char_p

# name: (restype, argtypes)
_PROTOTYPES = {
    "bs_abi_version": (_U32, []),
    "bs_last_error": (_STR, []),
    "bs_dtype_of_torch": (_STR, [_STR]),
    "bs_block_layout_bytes": (_INT, [ctypes.POINTER(_U64), _U32, ctypes.POINTER(_U64)]),
    "bs_offloader_create": (_INT, [ctypes.POINTER(OffloaderConfig), _PP]),
    "bs_offloader_destroy": (None, [_P]),
    "bs_offloader_ring_slots": (_U32, [_P]),
    "bs_offloader_streaming_count": (_U32, [_P]),
    "bs_offloader_streaming_block": (_U32, [_P, _U32]),
    "bs_offloader_check_block": (_INT, [_P, _U32, ctypes.POINTER(OffloaderTensor), _U32]),
    "bs_offloader_check_materialised": (_INT, [_P, _U32, _STR, _INT]),
    "bs_offloader_refuse_selection": (_INT, [_P, _U32, _STR, _STR]),
    "bs_offloader_refuse_capture": (_INT, [_STR]),
    "bs_offloader_connect": (_INT, [_P]),
    "bs_offloader_backend": (_INT, [_P]),
    "bs_offloader_use_device": (_INT, [_P, _INT, _STR, _STR]),
    "bs_offloader_open_model": (_INT, [_P, ctypes.POINTER(OffloaderBlock)]),
    "bs_offloader_model_id": (_STR, [_P]),
    "bs_offloader_master": (_P, [_P, _U32]),
    "bs_offloader_master_bytes": (_U64, [_P, _U32]),
    "bs_offloader_tensor_offset": (_U64, [_P, _U32, _U32]),
    "bs_offloader_start": (_INT, [_P, _P, BIND_FN, _P]),
    "bs_offloader_slot": (_P, [_P, _U32]),
    "bs_offloader_slot_bytes": (_U64, [_P]),
    "bs_offloader_slot_of": (_U32, [_P, _U32]),
    "bs_offloader_slot_block": (_U32, [_P, _U32]),
    "bs_offloader_prepare": (_INT, [_P]),
    "bs_offloader_wait_for_block": (_INT, [_P, _U32]),
    "bs_offloader_after_forward": (_INT, [_P, _U32]),
    "bs_offloader_after_backward": (_INT, [_P, _U32]),
    "bs_offloader_ensure_block": (_INT, [_P, _U32]),
    "bs_offloader_set_forward_only": (_INT, [_P, _INT]),
    "bs_offloader_finish_pass": (_INT, [_P]),
    "bs_offloader_last_pass": (_INT, [_P, _INT, ctypes.POINTER(PassStats)]),
    "bs_offloader_close": (_INT, [_P, _P, _U32]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return [(explicit, f"${LIBRARY_ENV}")]
    found = [(_BUNDLED, "the bundled copy")] if os.path.exists(_BUNDLED) else []
    return found + [(_SONAME, "the system library path")]


def library():
    """The loaded client library (loaded and checked on first use)."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, where in _candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as error:
                tried.append(f"{path} ({where}): {error}")
                continue
            # Checked before the prototypes: an older library lacks newer functions.
            lib.bs_abi_version.restype = ctypes.c_uint32
            lib.bs_abi_version.argtypes = []
            version = lib.bs_abi_version()
            # The ABI only grows: a newer library serves this package.
            if version < ABI_VERSION:
                raise ImportError(f"{path} ({where}) has blockswap C ABI version {version}; this "
                                  f"package needs version {ABI_VERSION} or later: install "
                                  "matching versions")
            for name, (restype, argtypes) in _PROTOTYPES.items():
                try:
                    function = getattr(lib, name)
                except AttributeError:
                    # Entry points the daemon's protocol does not involve
                    # (bs_offloader_*) grow the library without a new version.
                    raise ImportError(f"{path} ({where}) has no {name}: it is older than this "
                                      "package; install matching versions") from None
                function.restype = restype
                function.argtypes = argtypes
            _lib, _lib_path = lib, path
            return lib
        raise ImportError(
            "blockswap: cannot load the client library libblockswap.so; tried "
            + "; ".join(tried)
            + f". Set {LIBRARY_ENV} to its path (e.g. build/lib/libblockswap.so), install the "
            "bundled package (cmake --build build --target blockswap_python_bundle, then "
            "pip install build/python), or install the library system-wide")


def library_path():
    """Where the client library was loaded from."""
    library()
    return _lib_path


def check(code, what=None):
    """Raises BlockSwapError for a non-zero return of the C ABI (`what`, when
    given, before the library's message)."""
    if code != 0:
        message = library().bs_last_error().decode(errors="replace")
        raise BlockSwapError(code, f"{what}: {message}" if what else message)


def refuse(code):
    """check() for the offloader's set-up: its refusals of what the trainer
    passed (INVALID_ARGUMENT) are ValueErrors."""
    if code == BS_INVALID_ARGUMENT:
        raise ValueError(library().bs_last_error().decode(errors="replace"))
    check(code)
