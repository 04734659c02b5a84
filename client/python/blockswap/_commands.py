"""`blockswapctl` and `blockswapd` on the PATH of an environment that installed
the wheel: console entry points that exec the binaries bundled in
blockswap/_lib/ (deploy/build-wheel.sh puts them there, built with the
library beside them), so the command a user types is the one of this
package's version.
"""
import os
import sys

_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")


def _exec(name):
    binary = os.path.join(_LIB_DIR, name)
    if not os.access(binary, os.X_OK):
        sys.exit(f"{name}: no executable {binary} in this blockswap package "
                 "(only the wheel from deploy/build-wheel.sh bundles it)")
    os.execv(binary, [name, *sys.argv[1:]])


def blockswapctl():
    _exec("blockswapctl")


def blockswapd():
    _exec("blockswapd")
