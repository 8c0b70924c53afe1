"""The fixed train/val/test split of the trace library, a pure function of a trace's source."""

from __future__ import annotations

from mara_traces.common import parse_source

# (source field, value, split): the first rule whose field has that value decides; else train.
# Held out are whole datasets / environments / corpora, never single runs, and each split
# has sources of its own in every family, so a predictor or policy chosen on val has to
# generalise to a kind of curve it has not seen, and test is unlike both.  Library v2: every
# source of the first library (whose val/test numbers had been seen) is train now; val and
# test hold only sources that no earlier evaluation used.
SPLIT_RULES: tuple[tuple[str, str, str], ...] = (
    ("dataset", "gaussian_quantiles", "val"),  # tabular
    ("dataset", "friedman2", "val"),
    ("dataset", "hastie", "test"),
    ("dataset", "friedman3", "test"),
    ("dataset", "dots", "val"),  # vision
    ("dataset", "rings", "test"),
    ("env", "Taxi-v3", "val"),  # rl
    ("env", "MiniGrid-Dynamic-Obstacles-5x5-v0", "val"),
    ("env", "LunarLander-v3", "test"),
    ("env", "MiniGrid-Empty-5x5-v0", "test"),
    ("corpus", "code-xml", "val"),  # lm
    ("corpus", "prose-docstrings-concurrency", "val"),
    ("corpus", "code-http-urllib", "test"),
    ("corpus", "prose-docstrings-logging", "test"),
)


def split_of(source: str) -> str:
    """``train``, ``val`` or ``test`` for a source string, by :data:`SPLIT_RULES`."""
    fields = parse_source(source)
    for key, value, split in SPLIT_RULES:
        if fields.get(key) == value:
            return split
    return "train"
