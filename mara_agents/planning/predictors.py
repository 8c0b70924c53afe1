"""What a scheduler's ``predictor=`` knob may name, checked the same way for every scheduler.

``exact`` is the one name for planning on each task's exact remaining work
(``sim.remaining_true``); ``oracle`` names one thing only, the scheduler ``oracle`` (LARA's
planner on exact work), so ``predictor=oracle`` is refused with the name to write instead.
"""

from __future__ import annotations

from collections.abc import Sequence

EXACT = "exact"


def check_predictor(scheduler: str, predictor: str, allowed: Sequence[str]) -> None:
    """Raise ``ValueError`` naming ``scheduler`` unless ``predictor`` is one of ``allowed``."""
    if predictor in allowed:
        return
    if predictor == "oracle" and EXACT in allowed:
        raise ValueError(
            f"{scheduler}: predictor='oracle' is written predictor='exact' (exact remaining "
            "work; 'oracle' names the scheduler oracle)"
        )
    raise ValueError(f"{scheduler}: predictor={predictor!r}; expected one of {', '.join(allowed)}")
