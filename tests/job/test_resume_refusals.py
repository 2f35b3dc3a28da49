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
