"""``mara_env.threads.single_threaded``: one thread for numpy's BLAS and a loaded torch inside
the block, the caller's counts back after it (also when the block raises), and torch never
loaded by it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mara_env.threads import _blas_libraries, single_threaded


def test_inside_one_thread_after_the_callers_counts_also_on_error() -> None:
    torch = pytest.importorskip("torch")
    libs = _blas_libraries()
    assert libs, "threadpoolctl sees no BLAS library of numpy"
    before = torch.get_num_threads(), [lib.get_num_threads() for lib in libs]
    torch.set_num_threads(2)
    for lib in libs:
        lib.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), single_threaded():
            assert torch.get_num_threads() == 1
            assert [lib.get_num_threads() for lib in libs] == [1] * len(libs)
            raise RuntimeError("an episode failed")
        assert torch.get_num_threads() == 2
        assert [lib.get_num_threads() for lib in libs] == [2] * len(libs)
    finally:
        torch.set_num_threads(before[0])
        for lib, n in zip(libs, before[1]):
            lib.set_num_threads(n)


def test_it_does_not_load_torch() -> None:
    code = (
        "import sys\n"
        "from mara_env.threads import single_threaded\n"
        "with single_threaded():\n"
        "    pass\n"
        "assert 'torch' not in sys.modules, 'torch was loaded'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
