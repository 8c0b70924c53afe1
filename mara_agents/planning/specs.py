"""The one grammar that names a scheduler or a teacher: ``NAME[:key=value...]``.

The harness's registry (:mod:`mara_agents.evaluation.registry`) builds a scheduler from such
a spec, and a policy's teacher (:class:`mara_agents.policy.features.TeacherPlan`) is one;
both read a value's text here, once.
"""

from __future__ import annotations


def parse_value(text: str) -> int | float | str:
    """A knob's value from its spec text: an int, else a float, else the text itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text
