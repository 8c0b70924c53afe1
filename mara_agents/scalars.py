"""TensorBoard event files of scalars, for evaluation reports and training curves alike.

Written with the ``tensorboard`` package's own event writer: ``tensorboardX`` and
``torch.utils.tensorboard`` would import torch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping


class ScalarWriter:
    """An event file of TensorBoard scalars in ``log_dir``."""

    def __init__(self, log_dir: str | os.PathLike, filename_suffix: str = "") -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(log_dir), filename_suffix=filename_suffix)

    def add(self, step: int, scalars: Mapping[str, float]) -> None:
        """One event at ``step`` holding every ``tag: value`` of ``scalars``."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        event = Event(wall_time=time.time(), step=step, summary=Summary(value=values))
        self._writer.add_event(event)

    def flush(self) -> None:
        """Write the pending events to the file."""
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._writer.close()
