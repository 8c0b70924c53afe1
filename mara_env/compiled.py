"""numba's ``njit`` where the ``[predictor]`` extra is installed; without it (a bare
install: the env, the simple schedulers, ``flow_share:predictor=wls``) the same Python
functions run uncompiled.  One source for both: there is no numpy twin of a compiled
kernel.  The schedulers' round-robin (:func:`mara_env.schedulers.spread`) and the
predictor's per-tick kernels compile through it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import numba
except ImportError:  # a bare install
    numba = None


def maybe_njit(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``numba.njit(**options)`` if numba is installed, else the function itself."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn if numba is None else numba.njit(**options)(fn)

    return decorate
