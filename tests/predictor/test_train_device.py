"""The flow predictor's trainer on a chosen device (``TrainConfig.device``, ``--device``).

Run on the CPU: a device that is not the CPU is stood in for by ``meta`` (tensors with a
shape and no data), where mixing in a CPU tensor raises as it does on a GPU.
"""

from __future__ import annotations

import pytest
import torch

from flow_predictor.checkpoint import read_checkpoint
from flow_predictor.features import COND_DIM, TARGET_DIM
from flow_predictor.model import FlowConfig, VelocityNet, cfm_loss, linear_path
from flow_predictor.train import TrainConfig, resolve_device, train
from tests.predictor.test_flow_predictor import library, tiny  # noqa: F401 (a fixture)

torch.set_num_threads(1)


def _batch(device: str = "cpu") -> tuple[VelocityNet, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = VelocityNet(FlowConfig(COND_DIM, TARGET_DIM, hidden=16, depth=1, cond_hidden=8))
    x1 = torch.randn(5, TARGET_DIM)
    cond = torch.randn(5, COND_DIM)
    mask = (torch.rand(5, TARGET_DIM) > 0.2).float()
    return net.to(device), x1.to(device), cond.to(device), mask.to(device)


def test_cfm_loss_draws_on_the_cpu_as_it_always_did():
    net, x1, cond, mask = _batch()
    got = cfm_loss(net, x1, cond, mask, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)  # the draws the loss made before --device
    x0 = torch.randn(x1.shape, generator=gen)
    t = torch.rand((x1.shape[0], 1), generator=gen)
    xt, ut = linear_path(x0, x1, t)
    want = ((net(xt, t, net.encode(cond)) - ut) ** 2 * mask).sum() / mask.sum()
    assert torch.equal(got, want)


def test_a_training_step_keeps_every_tensor_on_the_network_device():
    net, x1, cond, mask = _batch("meta")
    loss = cfm_loss(net, x1, cond, mask, generator=torch.Generator().manual_seed(0))
    loss.backward()  # no "not on the expected device": draws and embeddings moved there
    assert loss.device.type == "meta"
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in net.parameters())


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    default = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(None) == torch.device(default)
    for bad in ("tpu9", "", "meta", "cpu:1", "cuda:99"):
        with pytest.raises(ValueError, match="expected cpu"):
            resolve_device(bad)
    with pytest.raises(ValueError, match=r"train: device='tpu9'; expected cpu"):
        TrainConfig(device="tpu9")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(ValueError, match=r"expected cpu.*this machine has no CUDA device"):
        resolve_device("cuda")


def test_cpu_training_is_the_same_with_the_device_named(tmp_path, library):  # noqa: F811
    """``device='cpu'`` trains exactly what the default did on a machine without CUDA (and
    what training did before the option: the draws are unchanged, test above); the
    checkpoints hold CPU tensors and record the device."""
    runs = {}
    for device in ("cpu", None):
        out = tmp_path / str(device) / "flow.pt"
        train(tiny(library, out, device=device, batch_size=32), progress=False)
        runs[device] = read_checkpoint(out), read_checkpoint(out.with_suffix(".last.pt"))
    for blob in runs["cpu"]:
        assert blob["train"]["device"] == "cpu"
        assert all(v.device.type == "cpu" for v in blob["state_dict"].values())
    if torch.cuda.is_available():
        return
    for named, default in zip(runs["cpu"], runs[None]):
        assert named["state_dict"].keys() == default["state_dict"].keys()
        for key, value in named["state_dict"].items():
            assert torch.equal(value, default["state_dict"][key]), key
        assert named["train"]["val"] == default["train"]["val"]
        assert named["calibration"] == default["calibration"]


def _refused(capsys, argv: list[str], *words: str) -> None:
    from mara_agents.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("command", ["train", "lofo"])
def test_cli_refuses_an_unusable_device_in_one_line(tmp_path, capsys, command):
    out = str(tmp_path / ("run/flow.pt" if command == "train" else "lofo"))
    argv = ["predictor", command, "--out", out, "--device"]
    _refused(capsys, [*argv, "tpu9"], "--device tpu9: expected cpu")
    if not torch.cuda.is_available():
        _refused(capsys, [*argv, "cuda"], "--device cuda: expected cpu", "no CUDA")
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_cli_trains_on_the_device_named(tmp_path, capsys, library):  # noqa: F811
    from mara_agents.cli import main

    out = tmp_path / "run" / "flow.pt"
    argv = ["predictor", "train", "--traces", library, "--out", str(out), "--epochs", "1"]
    argv += ["--prefixes-per-trace", "4", "--hidden", "16", "--depth", "1", "--quiet"]
    assert main([*argv, "--device", "cpu"]) == 0
    record = read_checkpoint(out)["train"]
    assert (record["device"], record["config"]["device"]) == ("cpu", "cpu")
