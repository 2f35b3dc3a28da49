"""strategy.backend=horovod: the real horovod.torch, 2 ranks started by ``horovodrun --gloo``.

Runs in the venv that ``scripts/build_horovod.sh`` builds (FRAMEWORK_HOROVOD_VENV, default
.cache/horovod-venv: Horovod 0.28.1 against torch 2.13.0), with this checkout's framework on
its path. Where that venv is missing the horovodrun tests skip, unless FRAMEWORK_REQUIRE_HOROVOD=1
(CI builds it and sets it), which makes a missing venv a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from framework import compose
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import BASE, train_losses

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("FRAMEWORK_HOROVOD_VENV", ROOT / ".cache" / "horovod-venv"))
# BASE (accumulation of 2: Horovod's backward_passes_per_step), 3 epochs, a checkpoint per epoch.
RUN = [
    *BASE,
    "trainer.max_epochs=3",
    "callbacks.model_checkpoint.save_top_k=-1",
    "callbacks.early_stopping=null",
    "strategy=horovod",
    "trainer.devices=2",
]


@pytest.fixture(scope="module")
def venv_bin() -> Path:
    python = VENV / "bin" / "python"
    found = (
        python.exists()
        and subprocess.run([str(python), "-c", "import horovod.torch"], capture_output=True).returncode == 0
    )
    if not found:
        message = f"no horovod venv at {VENV}: run bash scripts/build_horovod.sh"
        if os.environ.get("FRAMEWORK_REQUIRE_HOROVOD") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return VENV / "bin"


def _train(command: list[str], out: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``command`` (horovodrun ... python, or python) -m framework.train, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FRAMEWORK_HOROVOD_VENV", None)
    return subprocess.run(
        [*command, "-m", "framework.train", *RUN, *overrides, f"hydra.run.dir={out}"],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _horovodrun(venv_bin: Path) -> list[str]:
    return [str(venv_bin / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2", str(venv_bin / "python")]


def test_horovodrun_gives_the_native_backends_losses_and_resumes_exactly(venv_bin, tmp_path):
    real = _train(_horovodrun(venv_bin), tmp_path / "horovod", "strategy.backend=horovod")
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    native = _train([str(venv_bin / "python")], tmp_path / "native")  # our launcher, the same torch
    assert native.returncode == 0, native.stderr[-3000:]
    results = json.loads((tmp_path / "horovod" / "results.json").read_text())
    assert results["status"] == "completed" and results["world_size"] == 2 and results["steps"] == 9
    losses = train_losses(tmp_path / "horovod")
    assert len(losses) == 9 and losses == pytest.approx(train_losses(tmp_path / "native"), rel=1e-5)
    ref, got = torch.load(tmp_path / "native" / "model.pt"), torch.load(tmp_path / "horovod" / "model.pt")
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    assert results["comm"] == {
        "bytes_per_step": 4 * results["memory"]["parameters"],
        "algorithm": "horovod.torch/average",
    }
    # Resumed under horovodrun from the first epoch's checkpoint (torch.distributed.checkpoint
    # through the torch group made from Horovod's rendezvous): the same last two epochs.
    first = next((tmp_path / "horovod" / "checkpoints").glob("epoch0-*"))
    resumed = _train(_horovodrun(venv_bin), tmp_path / "resumed", "strategy.backend=horovod", f"ckpt_path={first}")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert train_losses(tmp_path / "resumed") == pytest.approx(losses[3:], rel=1e-6)


def test_horovod_backend_refuses_what_it_cannot_run(venv_bin, tmp_path):
    # 2 ranks without horovodrun, and Adasum, which Horovod runs only over MPI: both named at once.
    refused = _train([str(venv_bin / "python")], tmp_path / "refused", "strategy.backend=horovod", "strategy.op=adasum")
    assert refused.returncode != 0
    assert "2 ranks must be started by horovodrun: horovodrun --gloo -np 2" in refused.stderr
    assert "strategy.op=adasum: Horovod runs Adasum only over MPI" in refused.stderr
    assert not (tmp_path / "refused" / "results.json").exists()  # refused before any rank started


def test_horovod_backend_without_horovod_names_the_build_script(monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # as in an environment without it
    with pytest.raises(
        ConfigError,
        match=r"strategy.backend=horovod: horovod.torch is not importable .*"
        r"bash scripts/build_horovod.sh",
    ):
        preflight(compose([*BASE, "strategy=horovod", "strategy.backend=horovod"]))


def test_only_the_horovod_backend_runs_under_horovodrun(monkeypatch):
    for key, value in {
        "HOROVOD_RANK": "0",
        "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "0",
        "HOROVOD_LOCAL_SIZE": "2",
    }.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(
        ConfigError,
        match="strategy=ddp: horovodrun started this process, and only strategy=horovod "
        "strategy.backend=horovod runs under it",
    ):
        preflight(compose([*BASE, "strategy=ddp", "trainer.devices=2"]))
