"""The one check that a directory can take a command's or a run's output files.

A probe file is written rather than asking ``os.access``, which reads permission bits
that root passes where it still cannot write (``/proc``, for one).
The CLI (:mod:`mara_agents.commands.checks`) and training
(:func:`mara_agents.training.records.check_out`) both ask it, each raising its own error
type with the message.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def output_dir_problem(path: str | os.PathLike, label: object = None) -> str | None:
    """Why no new file can be written in directory ``path`` (which may not exist yet), as
    "<what>; expected <what>", or None when one can; ``label`` (default: ``path``) is what
    the caller's message shows, so an ancestor that is a file is named unless it is that.

    The file system is left as it was (directories made for the probe are removed again).
    """
    path = Path(path)
    label = path if label is None else label
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == label else f"{existing} is a file"
        return f"{what}; expected a directory there"
    made = None if existing == path else existing / path.relative_to(existing).parts[0]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"cannot write in {path} ({exc.strerror or exc}); expected a writable directory"
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    return None
