"""Optional dependencies: which extra of ``mara-sched`` installs what, and the error when
one is missing.

``pip install mara-sched`` gives the simulator, the env, the torch-free baselines and the
CLI; the extras below add the rest (they mirror ``[options.extras_require]`` in
``setup.cfg``).  A command that needs one calls :func:`require` before any work starts,
so a bare install stops with one line naming the extra, not a traceback.
"""

from __future__ import annotations

import importlib.util

# extra -> the top-level modules it installs (the first extra listing a module is the one
# to name when that module is missing)
EXTRAS: dict[str, tuple[str, ...]] = {
    "predictor": ("torch", "threadpoolctl", "numba"),
    "collect": ("torch", "sklearn", "minigrid", "Box2D"),
    "rllib": ("torch", "threadpoolctl", "numba", "ray"),
    "live": ("torch", "threadpoolctl", "numba", "ray", "sklearn"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"needs {module}, which is not installed; "
            f"install it with: pip install 'mara-sched[{extra}]'",
            name=module,
        )
        self.extra = extra

    def __reduce__(self) -> tuple:
        return MissingExtra, (self.name, self.extra)


def require(extra: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported."""
    for module in EXTRAS[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(module, extra)


def as_missing_extra(exc: ImportError) -> MissingExtra | None:
    """``exc`` as a :class:`MissingExtra` if an extra installs the missing module, else None."""
    if isinstance(exc, MissingExtra):
        return exc
    if not isinstance(exc, ModuleNotFoundError):
        return None
    module = (exc.name or "").partition(".")[0]
    extra = next((e for e, modules in EXTRAS.items() if module in modules), None)
    return None if extra is None else MissingExtra(module, extra)
