"""What a forked child (a DataLoader worker, PyTorch's default on Linux) may do.

Nothing of blockswap's: the parent's session, its gRPC channel (whose threads
do not survive fork()) and its mappings of masters and ring slots belong to
the parent. The C ABI refuses every call on an inherited handle itself
(FAILED_PRECONDITION) and only forgets inherited handles that are destroyed
(client/core/owner_process.h). This layer says so earlier and in Python's
terms: once a process has loaded libblockswap.so, its forked children get a
clear error from every call into blockswap that names the 'spawn' start
method, and closing (or collecting) an inherited offloader in a child
forgets its handles without calling the library.
"""
import os

from . import _abi

_FAILED_PRECONDITION = 9
_forked_from = None  # the parent's pid, in a child forked after the library loaded
_pid = os.getpid()


def _after_fork_in_child():
    global _forked_from, _pid
    if _abi._lib is not None and _forked_from is None:
        _forked_from = _pid
    _pid = os.getpid()


def _before_fork():
    global _pid
    _pid = os.getpid()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def in_forked_child():
    return _forked_from is not None


def check(what):
    """Raises BlockSwapError in a child forked after libblockswap.so loaded."""
    if _forked_from is not None:
        raise _abi.BlockSwapError(
            _FAILED_PRECONDITION,
            f"blockswap: {what} in process {os.getpid()}, which was forked from process "
            f"{_forked_from} after that one loaded libblockswap.so (a DataLoader worker?): "
            f"the blockswapd session, its channel and its mappings belong to the parent and "
            f"cannot be used here. Call blockswap from the parent only, or start the workers "
            f"with the 'spawn' or 'forkserver' start method (DataLoader("
            f"multiprocessing_context='spawn')), whose processes may connect on their own")
