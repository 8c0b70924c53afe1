"""A user's own trainer for the live-mode tests, imported by path
(``tests.live.live_trainers:...``)."""

from __future__ import annotations

from mara_agents.live.trainers import VisionTrainer

FAIL_AT = 20


class Exploding(VisionTrainer):
    """The built-in vision trainer, until its own code raises at step ``FAIL_AT``."""

    def after_step(self) -> None:
        super().after_step()
        if self.steps >= FAIL_AT:
            raise ValueError(f"loss is NaN at step {self.steps} (the job's own bug)")


class ExplodingAtOnce(Exploding):
    """Raises on its first training step: inside the probe, before the run starts."""

    def after_step(self) -> None:
        VisionTrainer.after_step(self)
        raise ValueError(f"loss is NaN at step {self.steps} (the job's own bug)")
