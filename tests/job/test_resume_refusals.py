"""A resume that cannot continue the run says why in one line, naming the tensors; one that can,
with the run's own command line repeated, continues it (a deletion it made included)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from framework import compose, fit
from tests.helpers.configs import GPT_TINY

RUN = [*GPT_TINY, "trainer.max_steps=2", "test=false", "trainer.limit_val_batches=0"]


def test_a_checkpoint_of_another_model_size_fails_in_one_line_naming_its_tensors(tmp_path):
    assert fit(compose(RUN), output_dir=str(tmp_path / "run"))["status"] == "completed"
    checkpoint = tmp_path / "run" / "checkpoints" / "last"
    line = [sys.executable, "-m", "framework.train", *RUN, "model.dim=64", f"ckpt_path={checkpoint}"]
    done = subprocess.run([*line, f"hydra.run.dir={tmp_path / 'other'}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    [error] = done.stderr.strip().splitlines()
    assert error.startswith(f"Error: checkpoint '{checkpoint}' is whole") and "saved with another model" in error
    assert "model.tok_embeddings.weight (saved [256, 32], here [256, 64])" in error or "other shapes:" in error


@pytest.mark.multiprocess
def test_the_runs_own_command_line_with_a_deletion_resumes_it_in_place(tmp_path):
    line = [
        sys.executable,
        "-m",
        "framework.train",
        "model=gpt/tiny",
        "datamodule=text",
        "task=language_modeling",
        "datamodule.seq_len=32",
        "~callbacks.early_stopping",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={tmp_path}",
    ]
    first = subprocess.run([*line, "trainer.max_steps=2"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(
        [*line, "trainer.max_steps=4", "ckpt_path=last"], capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Resumed from" in again.stdout + again.stderr and "at epoch 0, step 2" in again.stdout + again.stderr


def test_an_adapter_checkpoint_names_the_adapter_it_needs_before_start_and_where_it_loads(tmp_path, monkeypatch):
    """A LoRA checkpoint loaded into a plain model failed as "another model or optimizer"."""
    from framework.config import ConfigError
    from framework.engine.checkpoint import CheckpointError
    from framework.job import preflight as checks

    assert (
        fit(compose([*RUN, "adapter=lora", "adapter.r=4"]), output_dir=str(tmp_path / "lora"))["status"] == "completed"
    )
    assert fit(compose(RUN), output_dir=str(tmp_path / "plain"))["status"] == "completed"
    lora, plain = (tmp_path / name / "checkpoints" / "last" for name in ("lora", "plain"))
    for more, message in [
        ([], f"ckpt_path: {lora} holds adapters alone, not the base's weights: it loads into the model with its "
             "adapter (adapter=lora adapter.r=4), and this run has none (adapter: null)"),
        (["adapter=lora"], f"ckpt_path: {lora} holds the adapters of adapter=lora adapter.r=4, and this run's are "
                           "adapter.r=8: load it with its own"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as err:
            checks.preflight(compose([*RUN, f"ckpt_path={lora}", *more]))
        assert any(p.startswith(message) for p in err.value.problems), err.value.problems
    with pytest.raises(ConfigError) as err:
        checks.preflight(compose([*RUN, f"ckpt_path={plain}", "adapter=lora"]))
    assert f"ckpt_path: {plain} holds a whole model's weights, without adapters" in str(err.value)
    checks.preflight(compose([*RUN, f"ckpt_path={lora}", "adapter=lora", "adapter.r=4", "adapter.alpha=8"]))
    monkeypatch.setattr(checks, "check_adapter_base", lambda run: [])  # where it loads, past the checks
    with pytest.raises(CheckpointError, match=r"it holds adapters alone \(r=4, alpha=16.0, .*\): load it into a model"):
        fit(compose([*RUN, f"ckpt_path={lora}"]), output_dir=str(tmp_path / "unchecked"))


def test_a_resume_without_its_adapter_is_advised_on_the_command_line_and_the_advice_runs(tmp_path):
    """``adapter=null`` on a resume advised ``~adapter``, which Hydra then refused ("Could not delete
    'adapter'. No match in the defaults list"): the saved run's groups are keys of its config."""
    run = [
        sys.executable,
        "-m",
        "framework.train",
        f"hydra.run.dir={tmp_path}",
        "trainer.max_steps=3",
        "ckpt_path=last",
    ]
    assert fit(compose([*RUN, "adapter=lora", "adapter.r=4"]), output_dir=str(tmp_path))["status"] == "completed"

    def resumed(*more):
        return subprocess.run([*run, *more], capture_output=True, text=True, timeout=300)

    null = resumed("adapter=null")
    assert (
        null.returncode == 2
        and "adapter: 'adapter=null' selects nothing on the command line; '~adapter' removes" in (null.stderr)
    )
    removed = resumed("~adapter")  # the advice: Hydra takes it; the checkpoint then says what it needs
    assert removed.returncode == 2 and "Could not delete" not in removed.stderr + removed.stdout, removed.stderr[-2000:]
    assert "holds adapters alone, not the base's weights: it loads into the model with its adapter (adapter=lora" in (
        removed.stderr
    )
    kept = resumed()  # and that advice: a resume in its own directory keeps the adapter
    assert kept.returncode == 0 and "at epoch 0, step 2" in kept.stdout + kept.stderr, kept.stderr[-2000:]
