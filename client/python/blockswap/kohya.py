"""Runs a kohya trainer (musubi-tuner, sd-scripts) unmodified on blockswap.

    python -m blockswap.kohya SCRIPT.py ARGS...
    python -m blockswap.kohya -m PACKAGE.MODULE ARGS...
    accelerate launch [its options] -m blockswap.kohya SCRIPT.py ARGS...

The trainers bind the offloader's names when their model modules import
(`from musubi_tuner.modules.custom_offloading_utils import ModelOffloader`,
`from library import custom_offloading_utils`), so the replacement must be in
place before anything of theirs runs: an import hook makes every module named
`custom_offloading_utils` (at any depth: `library.`, `musubi_tuner.modules.`,
`modules.`) resolve to `blockswap.custom_offloading_utils`. Their own file is
never executed. Then the script runs as `python SCRIPT.py ARGS...` would run it
(`__main__`, `sys.argv`, `sys.path[0]` its directory), or the module as
`python -m` would.

In a program of one's own: `import blockswap.kohya; blockswap.kohya.install()`
before the trainer's modules are imported.
"""
import importlib.abc
import importlib.machinery
import os
import runpy
import sys

from . import custom_offloading_utils as _blockswap_module

REPLACED = "custom_offloading_utils"
_USAGE = "usage: python -m blockswap.kohya SCRIPT.py [ARGS...] | -m MODULE [ARGS...]"


class _Replacement(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every `[*.]custom_offloading_utils` and loads it as blockswap's."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.rpartition(".")[2] != REPLACED or fullname == _blockswap_module.__name__:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=_blockswap_module.__file__)

    def create_module(self, spec):
        # The one module object under every name it replaces: what a trainer
        # imports as library.custom_offloading_utils is the same module (and the
        # same classes) as blockswap.custom_offloading_utils.
        print(f"blockswap.kohya: {spec.name} is {_blockswap_module.__name__}",
              file=sys.stderr, flush=True)
        return _blockswap_module

    def exec_module(self, module):
        pass  # already executed, as blockswap.custom_offloading_utils


_finder = _Replacement()


def install():
    """Puts the import hook first on sys.meta_path (idempotent). A module of
    that name imported before stays what it is: install before the trainer."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    stale = [name for name, module in sys.modules.items()
             if name.rpartition(".")[2] == REPLACED and module is not _blockswap_module]
    if stale:
        raise RuntimeError(f"blockswap.kohya: {', '.join(stale)} was imported before the hook "
                           f"was installed, so the trainer may already hold its names: install "
                           f"the hook before importing the trainer")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m":
        if len(argv) < 2:
            print(_USAGE, file=sys.stderr)
            return 2
        install()
        sys.argv = argv[1:]  # sys.path[0] is the working directory already, as for `python -m`
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.isfile(script):
        print(f"blockswap.kohya: no script {script!r} ({_USAGE})", file=sys.stderr)
        return 2
    install()
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` has it
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    # Through the module proper, so that a later `import blockswap.kohya` finds
    # the hook that is installed, not a second one.
    from blockswap.kohya import main as _main
    sys.exit(_main())
