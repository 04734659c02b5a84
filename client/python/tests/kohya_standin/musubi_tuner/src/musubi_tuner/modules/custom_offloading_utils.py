"""Stands in for the trainer's own offloading module (the reference's API, which the
scripts import from it). It must never run: `python -m blockswap.kohya` replaces it."""
raise ImportError(f"{__name__} of the stand-in ran: blockswap.kohya did not replace it")
