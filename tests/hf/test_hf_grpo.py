"""task=grpo (experiment=hf_grpo, a tiny Llama of random weights, LoRA) with a user's reward function:
the TRL metrics are logged; 2 ddp and 2 fsdp ranks give one device's answers, rewards and losses; a run whose
rank is killed on 2 fsdp ranks inside a window of answers resumes on one device with the uninterrupted
run's; a reward function that fails stops the run naming itself and the step, its checkpoints kept; what
GRPO cannot run is refused before start."""

from __future__ import annotations

import csv

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import train_losses
from tests.helpers.layouts import runs_once

pytest.importorskip("transformers")
pytest.importorskip("peft")


def grpo(*more: str) -> list[str]:
    """4 steps of 4 prompts x 4 answers, a window of answers every 4 steps (its later steps train on answers an
    older policy sampled: the ratio and its clip at work), checkpoints every 2 steps."""
    return [
        "experiment=hf_grpo",
        "task.rewards=[tests.helpers.rewards.digits]",
        "task.steps_per_generation=4",
        "optimizer.lr=0.01",
        "trainer.max_steps=4",
        "trainer.log_every_n_steps=1",
        "trainer.val_on_start=false",
        "trainer.enable_progress_bar=false",
        "trainer.accelerator=cpu",
        "logger=csv",
        "seed=3",
        "strategy.timeout_s=60",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=2",
        *more,
    ]


LAYOUTS = {
    "single": ["strategy=single"],
    "ddp": ["strategy=ddp", "trainer.devices=2"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return runs_once(tmp_path_factory, grpo(), LAYOUTS)


def _column(run_dir, key: str) -> list[float]:
    with open(run_dir / "metrics.csv") as f:
        return [float(r[key]) for r in csv.DictReader(f) if r.get(key)]


def test_it_logs_trls_metrics_and_the_users_reward(runs):
    run_dir, results = runs("single")
    assert results["status"] == "completed" and results["steps"] == 4
    with open(run_dir / "metrics.csv") as f:
        logged = set(next(csv.DictReader(f)))
    for key in ("reward", "reward_std", "rewards/digits/mean", "frac_reward_zero_std", "completions/mean_length",
                "completions/clipped_ratio", "clip_ratio/region_mean"):  # fmt: skip
        assert f"train/{key}" in logged, key
    assert len(_column(run_dir, "train/rewards/digits/mean")) == 4 and 0 < _column(run_dir, "train/reward")[0] < 1
    assert "val/reward" in results["metrics"]
    assert any(abs(loss) > 1e-4 for loss in train_losses(run_dir))  # (answers of differing lengths and rewards)


@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_two_ranks_give_one_devices_rewards_and_losses(runs, layout):
    single_dir, _ = runs("single")
    run_dir, results = runs(layout)
    assert results["status"] == "completed" and results["world_size"] == 2
    for key in ("train/loss", "train/reward", "train/completions/mean_length", "train/clip_ratio/region_mean"):
        assert _column(run_dir, key) == pytest.approx(_column(single_dir, key), abs=1e-5), key
    assert results["metrics"]["val/reward"] == pytest.approx(runs("single")[1]["metrics"]["val/reward"], abs=1e-5)


def test_killed_inside_a_window_on_two_fsdp_ranks_it_resumes_on_one_device_with_the_same_steps(runs, tmp_path):
    single_dir, _ = runs("single")
    kill = ["+callbacks.kill._target_=tests.helpers.probes.SignalAt", "+callbacks.kill.step=3",
            "+callbacks.kill.signal=SIGKILL", "+callbacks.kill.rank=1"]  # fmt: skip
    with pytest.raises(RuntimeError, match="rank 1 failed: killed by SIGKILL"):
        fit(compose(grpo("strategy=fsdp", "trainer.devices=2", *kill)), output_dir=str(tmp_path / "killed"))
    last = tmp_path / "killed" / "checkpoints" / "last"  # (step 2: half of the window's answers not trained on)
    resumed = fit(compose(grpo(f"ckpt_path={last}")), output_dir=str(tmp_path / "resumed"))
    assert resumed["status"] == "completed" and resumed["steps"] == 4
    for key in ("train/loss", "train/reward", "train/clip_ratio/region_mean"):
        assert _column(tmp_path / "resumed", key) == pytest.approx(_column(single_dir, key)[2:], abs=1e-6), key


def test_a_reward_function_that_fails_stops_the_run_naming_it_and_the_step(tmp_path):
    failing = grpo("task.rewards=[tests.helpers.rewards.fails_at_step_2]", "task.steps_per_generation=null")
    with pytest.raises(RuntimeError, match=r"fails_at_step_2 raised at step 2: ZeroDivisionError"):
        fit(compose(failing), output_dir=str(tmp_path))
    assert (tmp_path / "checkpoints" / "last").is_dir()  # (step 2's: the run's checkpoints stay)
    short = grpo("task.rewards=[tests.helpers.rewards.one_too_few]", "trainer.max_steps=1")
    with pytest.raises(RuntimeError, match=r"one_too_few returned 7 rewards on the val prompts for 8 completions"):
        fit(compose(short), output_dir=str(tmp_path / "short"))  # (the sanity check's validation, before step 0)
    with pytest.raises(RuntimeError, match=r"one_too_few returned 15 rewards at step 0 for 16 completions"):
        fit(compose([*short, "trainer.num_sanity_val_steps=0"]), output_dir=str(tmp_path / "shorter"))


def test_what_grpo_cannot_run_is_refused_before_start():
    cases = {
        "task.rewards=[no.such.function]": "task.rewards[0]: 'no.such.function' does not import",
        "task.num_generations=1": "task.num_generations: must be >= 2",
        "task.rewards=[framework.tasks.rewards.reasoning_gym]": "task.rewards[0]: reasoning_gym needs metadata",
        "task.max_new_tokens=40": "task.max_new_tokens: 40 answer tokens after a prompt of up to",
        "task.steps_per_generation=3": "task.steps_per_generation: 3 micro-batches per window",
        "datamodule=instructions": "samples answers to prompts, but datamodule InstructionsDataModule gives",
    }
    for override, message in cases.items():
        extra = ["trainer.accumulate_grad_batches=2"] if "steps_per_generation" in override else []
        with pytest.raises(ConfigError) as err:
            preflight(compose(["experiment=hf_grpo", override, *extra]))
        assert any(message in p for p in err.value.problems), (override, err.value.problems)


def test_dynamic_sampling_refills_the_groups_whose_rewards_are_alike_alike_on_two_ranks(tmp_path):
    """The reward "holds two digits", which a random model's answers seldom do: most groups score all 0. The
    refills are drawn by (seed, step, round), so 2 ddp ranks refill as one device does."""
    two = "task.rewards=[{function: framework.tasks.rewards.format, pattern: '.*\\d.*\\d.*'}]"
    run = grpo(two, "task.dynamic_sampling=true", "task.max_sampling_rounds=3", "task.steps_per_generation=null",
               "trainer.limit_val_batches=0")  # fmt: skip
    for name, layout in {"single": [], "ddp": ["strategy=ddp", "trainer.devices=2"]}.items():
        assert fit(compose([*run, *layout]), output_dir=str(tmp_path / name))["status"] == "completed"
    dropped = _column(tmp_path / "single", "train/dynamic_sampling/dropped")
    unfilled = _column(tmp_path / "single", "train/dynamic_sampling/unfilled")
    assert max(dropped) >= 0.5 and sum(unfilled) < sum(dropped), (dropped, unfilled)  # (most groups alike at first)
    assert _column(tmp_path / "single", "train/frac_reward_zero_std") == pytest.approx(unfilled)  # (trained on)
    for key in ("train/loss", "train/reward", "train/dynamic_sampling/unfilled"):
        assert _column(tmp_path / "ddp", key) == pytest.approx(_column(tmp_path / "single", key), abs=1e-5), key
