"""Scale-out: a two-node Ray cluster on one machine runs the evaluation harness."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from mara_agents.evaluation.runner import evaluate  # noqa: E402
from mara_env.config import ClusterConfig  # noqa: E402
from tests.conftest import SMALL  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    if ray.is_initialized():  # an earlier test in this worker process left its local Ray up
        ray.shutdown()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_evaluation_on_a_two_node_cluster_matches_local(cluster, tmp_path):
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    config = ClusterConfig(**SMALL)
    args = (["edf", "uniform", "random"], [1.0, 2.0], 4, [0])
    on_ray = evaluate(
        *args, config=config, address=cluster.address, progress=False, out_dir=tmp_path / "ray"
    )
    local = evaluate(*args, config=config, workers=1, progress=False)
    assert on_ray.equals(local)
    assert (tmp_path / "ray" / "results.csv").exists()


def test_smoke_training_on_a_two_node_cluster(cluster, tmp_path):
    from mara_agents.training.experiment import load_experiment
    from mara_agents.training.train import train
    from tests.agents.training.test_train import smoke_yaml

    exp = load_experiment(smoke_yaml(tmp_path))
    # the algorithm takes the head's CPU, the env runner has to go to the other node
    grid = train(exp, out=tmp_path / "runs", address=cluster.address, num_env_runners=1, verbose=0)
    result = grid[0]
    assert result.error is None
    assert result.metrics["training_iteration"] >= 1
    assert result.metrics["env_runners"]["num_env_steps_sampled"] > 0
