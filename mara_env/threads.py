"""One thread for numpy's BLAS and torch inside a block, the caller's thread counts restored
after: an episode is a sequence of small decisions (a scheduler's tick, a policy's round,
the flow model's ODE), whose small arrays only pay for more threads (up to 100x slower on
a busy host) and contend with the other worker processes of an evaluation.

Neither torch nor threadpoolctl is needed: BLAS is limited where threadpoolctl is installed
(the ``[predictor]`` extra), torch where it is already loaded (this module never loads it).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any


@functools.lru_cache(maxsize=1)
def _blas_libraries() -> tuple[Any, ...]:
    """threadpoolctl's handles of the BLAS libraries numpy uses (none without it)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # a bare install: numpy's BLAS keeps its threads
        return ()
    return tuple(c for c in ThreadpoolController().lib_controllers if c.user_api == "blas")


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """numpy's BLAS and torch (if loaded) on one thread inside; their counts restored after."""
    libs = _blas_libraries()
    threads = [lib.get_num_threads() for lib in libs]
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else 1
    for lib in libs:
        lib.set_num_threads(1)
    if torch_threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        for lib, n in zip(libs, threads):
            lib.set_num_threads(n)
        if torch_threads != 1:
            torch.set_num_threads(torch_threads)
