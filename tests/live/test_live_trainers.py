"""Live-mode trainers: seeded, restorable bit for bit, data-parallel exact, really learning."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from mara_agents.live.trainers import (
    TRAINERS,
    TabularConfig,
    TabularTrainer,
    make_trainer,
    train_step,
    trainer_config,
)

ROOT = Path(__file__).resolve().parents[2]
# Steps of the learning check, and the fraction of its start loss a trainer must get below.
LEARNS = {"tabular": (100, 0.4), "vision": (150, 0.5), "lm": (150, 0.6), "rl": (100, 0.6)}


@dataclass(frozen=True, kw_only=True)
class SmallTabularConfig(TabularConfig):
    """A user's own config: the tabular trainer, smaller."""

    n: int = 600
    batch: int = 32
    width: int = 8


class SmallTabular(TabularTrainer):
    """A user's own trainer, found by import path."""

    Config = SmallTabularConfig


class NotATrainer:
    """Has a config but none of the Trainer methods."""

    Config = SmallTabularConfig


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as a live worker runs (more only slow these tiny ops down)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _params(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def _grads(trainer, rank: int, world: int) -> list[torch.Tensor]:
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.shard_loss(rank, world).backward()
    return [p.grad.clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_same_seed_same_run_and_the_callers_rng_is_untouched(name: str) -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    a, b = make_trainer(name, {}, seed=7), make_trainer(name, {}, seed=7)
    assert torch.equal(torch.rand(3), expected)
    assert a.family == name and a.steps == 0
    runs = [[train_step(t) for _ in range(3)] + [t.evaluate()] for t in (a, b)]
    assert runs[0] == runs[1]
    assert a.steps == 3
    other = make_trainer(name, {}, seed=8)
    assert [train_step(other) for _ in range(3)] + [other.evaluate()] != runs[0]


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_state_then_load_continues_the_identical_run(name: str) -> None:
    trainer = make_trainer(name, {}, seed=1)
    for _ in range(5):
        train_step(trainer)
    blob = trainer.state()
    for _ in range(5):
        train_step(trainer)
    resumed = make_trainer(name, {}, seed=1)
    resumed.load(blob)
    assert resumed.steps == 5
    for _ in range(5):
        train_step(resumed)
    assert resumed.steps == trainer.steps == 10
    for p, q in zip(_params(trainer), _params(resumed), strict=True):
        assert torch.equal(p, q)
    assert resumed.evaluate() == trainer.evaluate()
    lrs = [g["lr"] for t in (trainer, resumed) for g in t.optimizer.param_groups]
    assert len(set(lrs)) == 1


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_shard_gradients_sum_to_the_global_batch_gradient(name: str) -> None:
    trainer = make_trainer(name, {}, seed=2)
    for _ in range(2):
        train_step(trainer)
    whole = _grads(trainer, 0, 1)
    shards = [_grads(trainer, rank, 3) for rank in range(3)]
    for g, *parts in zip(whole, *shards, strict=True):
        torch.testing.assert_close(sum(parts), g, rtol=1e-4, atol=1e-6)


def test_a_data_parallel_step_is_the_single_process_step() -> None:
    """Three ranks with an all-reduce (threads and a barrier here, gloo in live mode)."""
    world = 3
    single = make_trainer("vision", {}, seed=4)
    ranks = [make_trainer("vision", {}, seed=4) for _ in range(world)]
    barrier = threading.Barrier(world)
    posted: list[list[torch.Tensor]] = [[] for _ in range(world)]

    def make_allreduce(rank: int):
        def allreduce(grads: list[torch.Tensor]) -> None:
            posted[rank] = [g.clone() for g in grads]
            barrier.wait()
            for i, g in enumerate(grads):
                g.copy_(sum(p[i] for p in posted))
            barrier.wait()

        return allreduce

    for _ in range(2):
        train_step(single)
        threads = [
            threading.Thread(target=train_step, args=(ranks[r], r, world, make_allreduce(r)))
            for r in range(world)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for trainer in ranks:
        assert trainer.steps == single.steps == 2
        for p, q in zip(_params(single), _params(trainer), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(LEARNS))
def test_held_out_loss_falls(name: str) -> None:
    steps, fraction = LEARNS[name]
    trainer = make_trainer(name, {}, seed=0)
    start = trainer.evaluate()
    for _ in range(steps):
        train_step(trainer)
    assert trainer.evaluate() < fraction * start


def test_a_users_trainer_by_import_path() -> None:
    trainer = make_trainer("tests.live.test_live_trainers:SmallTabular", {"width": 4}, seed=0)
    assert isinstance(trainer, SmallTabular) and trainer.config.width == 4
    before = trainer.evaluate()
    for _ in range(30):
        train_step(trainer)
    assert trainer.evaluate() < before


def test_defaults_are_one_dataclass_per_trainer() -> None:
    for name, cls in TRAINERS.items():
        config = trainer_config(name, {})
        assert type(config) is cls.Config
        assert trainer_config(name, dataclasses.asdict(config)) == config
    assert trainer_config("tabular", {"lr": 1}).lr == 1.0  # an int is a fine float


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("resnet", {}, r"unknown trainer 'resnet'; expected one of \['lm', 'rl'"),
        ("tabular", {"widht": 3}, r"unknown parameter 'widht' of trainer 'tabular'; allowed: "),
        ("tabular", {"lr": "fast"}, r"parameter 'lr' of trainer 'tabular' must be float"),
        ("vision", {"batch": 2.5}, r"parameter 'batch' of trainer 'vision' must be int"),
        ("lm", {"depth": True}, r"parameter 'depth' of trainer 'lm' must be int"),
        ("rl", {"env": "Pong-v5"}, r"trainer 'rl': env='Pong-v5': expected one of \['CartP"),
        ("lm", {"width": 50}, r"width=50: expected a positive multiple of heads=4"),
        ("vision", {"held_out": 1}, r"held_out=1.0: expected a fraction in \(0, 1\)"),
        ("tabular", {"batch": 50_000}, r"batch=50000: expected an integer in 1\.\.36000"),
        ("no_such_pkg.mod:Trainer", {}, r"cannot import 'no_such_pkg.mod'"),
        ("mara_traces.common:Nope", {}, r"module 'mara_traces.common' has no class 'Nope'"),
        ("json:JSONDecoder", {}, r"trainer 'json:JSONDecoder' needs a dataclass 'Config'"),
        ("tests.live.test_live_trainers:NotATrainer", {}, r"lacks the Trainer methods \['shard_l"),
    ],
)
def test_bad_names_and_params_say_which(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        make_trainer(name, params, seed=0)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("params", [{"gama": 0.9}, {"lr": [1e-3]}])
def test_unknown_key_and_wrong_type_list_the_allowed_keys(params: dict) -> None:
    allowed = [f.name for f in dataclasses.fields(TRAINERS["rl"].Config)]
    with pytest.raises(ValueError, match=r"allowed: \['opt', 'lr', 'sched', 'batch'") as err:
        trainer_config("rl", params)
    assert str(err.value).endswith(f"allowed: {allowed}")


def test_a_negative_or_non_integer_seed_is_refused() -> None:
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"seed={seed!r}: expected an integer >= 0"):
            make_trainer("rl", {}, seed)


def test_shards_out_of_range_are_refused() -> None:
    trainer = make_trainer("rl", {}, seed=0)
    with pytest.raises(ValueError, match=r"world=9: expected an integer in 1\.\.batch=8"):
        trainer.shard_loss(0, 9)
    with pytest.raises(ValueError, match=r"rank=3: expected an integer in 0\.\.2"):
        trainer.shard_loss(3, 3)


def test_load_refuses_corrupt_and_foreign_states() -> None:
    tabular = make_trainer("tabular", {"n": 600, "batch": 32}, seed=0)
    blob = tabular.state()
    for bad in (b"not a checkpoint", blob[: len(blob) // 2]):
        with pytest.raises(ValueError, match=r"corrupt trainer state blob \(\d+ bytes\)") as err:
            tabular.load(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"state is of trainer '.*:TabularTrainer', not '.*:Vis"):
        make_trainer("vision", {}, seed=0).load(blob)
    with pytest.raises(ValueError, match=r"the state has width=256, this trainer width=8"):
        make_trainer("tabular", {"n": 600, "batch": 32, "width": 8}, seed=0).load(blob)
    with pytest.raises(ValueError, match=r"the state has seed=0, this trainer seed=5"):
        make_trainer("tabular", {"n": 600, "batch": 32}, seed=5).load(blob)
    not_a_state = make_trainer("tabular", {"n": 600, "batch": 32}, seed=0)
    buf = io.BytesIO()
    torch.save({"model": {}}, buf)
    with pytest.raises(ValueError, match=r"lacks the keys"):
        not_a_state.load(buf.getvalue())


def test_the_trainers_import_torch_but_not_ray() -> None:
    code = (
        "import sys, mara_agents.live.trainers\n"
        "assert 'torch' in sys.modules\n"
        "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _spec(**params) -> dict:
    return {"name": "j", "trainer": "lm", "params": params, "seed": 0}


def test_a_slice_evaluates_every_eval_every_steps_and_stops_at_the_target() -> None:
    from mara_agents.live.worker import NodeWorker

    start = make_trainer("lm", {}, seed=0).evaluate()
    spec = {**_spec(), "target": start - 0.5, "eval_every": 4}  # reached within a few evals
    out = NodeWorker(0).run_slice(spec, 1, 0, 1, None, None, 30.0, 10.0)
    steps = [s for s, _ in out["evals"]]
    assert steps == list(range(4, 4 * len(steps) + 1, 4))
    losses = [v for _, v in out["evals"]]
    assert out["passed"] and losses[-1] <= spec["target"] < min(losses[:-1], default=9e9)
    assert out["steps"] == steps[-1]  # it stopped at that evaluation, long before 30 s
    far = {**spec, "target": 1e-6, "eval_every": 3}
    out = NodeWorker(0).run_slice(far, 1, 0, 1, None, None, 0.5, 10.0)
    assert not out["passed"] and all(s % 3 == 0 for s, _ in out["evals"])
    last = out["evals"][-1][0] if out["evals"] else 0  # the slice ran to its end
    assert 0 <= out["steps"] - last < 3


def test_a_diverging_job_fails_with_that_reason() -> None:
    from mara_agents.live.worker import NodeWorker

    spec = {**_spec(lr=float("inf")), "target": 0.1, "eval_every": 5}
    probe = NodeWorker(0).probe(spec, 0.2)
    assert "DivergedError: training loss is nan at step 1" in probe["error"]
    out = NodeWorker(0).run_slice(spec, 1, 0, 1, None, None, 2.0, 10.0)
    assert out["error"].startswith("DivergedError: training loss is nan at step 1")
    assert not out["communication"]  # the job's own failure, not a lost worker
