"""benchmarks/predictor_speed.py times whole episodes in turn, the same episode in every env
(the script refuses envs that play different episodes), and prints the median ratio."""

from __future__ import annotations

import re

from tests.conftest import run_script


def test_paired_episodes_print_a_ratio_per_wrapper():
    argv = "--seconds 0.2 --rounds 1 --slots 4 --episodes 2 --clock cpu"
    proc = run_script("benchmarks/predictor_speed.py", *argv.split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "predictions/s" in proc.stdout
    assert "(2 paired episodes, cpu clock)" in proc.stdout, proc.stdout[-2000:]
    ratios = re.findall(r"\+ (?:flow|wls) wrapper: (\S+)x the env \(median of paired", proc.stdout)
    assert len(ratios) == 2 and all(float(r) > 0 for r in ratios), proc.stdout[-2000:]
