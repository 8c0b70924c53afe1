"""The fixed train/val/test split of the trace library, a pure function of a trace's source."""

from __future__ import annotations

from mara_traces.common import parse_source

# (source field, value, split): the first rule whose field has that value decides; else train.
# Held out are whole datasets / environments / algorithms, never single runs, so a predictor
# evaluated on val/test has not seen that kind of curve.
SPLIT_RULES: tuple[tuple[str, str, str], ...] = (
    ("dataset", "wine", "test"),  # tabular
    ("dataset", "circles", "test"),
    ("dataset", "diabetes", "val"),
    ("dataset", "moons", "val"),
    ("dataset", "textures", "test"),  # vision
    ("dataset", "lines", "val"),
    ("env", "Acrobot-v1", "test"),  # rl
    ("algo", "dqn", "val"),
)


def split_of(source: str) -> str:
    """``train``, ``val`` or ``test`` for a source string, by :data:`SPLIT_RULES`."""
    fields = parse_source(source)
    for key, value, split in SPLIT_RULES:
        if fields.get(key) == value:
            return split
    return "train"
