"""Signals stop every rank at one step with `last` saved; a dead launcher leaves nothing running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from framework import compose, fit
from framework.engine.signals import Interrupted
from scripts.failure_drill import alive, tree
from tests.helpers.configs import BASE, TINY, train_losses

CKPT = ["callbacks=model_checkpoint", "callbacks.model_checkpoint.monitor=null", "logger=csv"]


def signal_at(step: int, name: str = "SIGTERM", rank: int = 0) -> list[str]:
    return [
        "+callbacks.sig._target_=tests.helpers.probes.SignalAt",
        f"+callbacks.sig.step={step}",
        f"+callbacks.sig.signal={name}",
        f"+callbacks.sig.rank={rank}",
    ]


def results(run_dir) -> dict:
    return json.loads((run_dir / "results.json").read_text())


@pytest.mark.parametrize("callbacks", [CKPT, ["callbacks=none", "logger=csv"]])
def test_sigterm_stops_saves_last_and_resumes_to_the_same_losses(tmp_path, callbacks):
    straight = fit(compose([*TINY, *callbacks]), output_dir=str(tmp_path / "straight"))
    with pytest.raises(Interrupted) as err:
        fit(compose([*TINY, *callbacks, *signal_at(3)]), output_dir=str(tmp_path / "run"))
    assert err.value.signum == signal.SIGTERM
    stopped = results(tmp_path / "run")
    # the signal arrived after step 3's optimizer step; the next step boundary is step 4
    assert stopped["status"] == "interrupted" and stopped["signal"] == "SIGTERM" and stopped["steps"] == 4
    manifest = json.loads((tmp_path / "run" / "checkpoints" / "last" / "manifest.json").read_text())
    assert manifest["step"] == 4
    resumed = fit(compose([*TINY, *callbacks, "ckpt_path=last"]), output_dir=str(tmp_path / "run"))
    assert resumed["status"] == "completed" and resumed["steps"] == straight["steps"] == 12
    assert train_losses(tmp_path / "run") == train_losses(tmp_path / "straight")  # bit for bit, one table
    assert resumed["metrics"]["test/acc"] == straight["metrics"]["test/acc"]


def test_sigusr1_under_slurm_checkpoints_and_requeues(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("FRAMEWORK_REQUEUE_COMMAND", f"touch {tmp_path}/requeued-{{job_id}}")
    with pytest.raises(Interrupted) as err:
        fit(compose([*TINY, *CKPT, *signal_at(2, "SIGUSR1"), "trainer.requeue=true"]), output_dir=str(tmp_path / "r"))
    assert err.value.signum == signal.SIGUSR1 and (tmp_path / "requeued-4242").exists()
    assert results(tmp_path / "r")["requeued"] is True and results(tmp_path / "r")["steps"] == 3


def test_a_signal_to_one_ddp_rank_stops_both_at_the_same_step(tmp_path):
    # rank 1 alone is signalled after step 2; the ranks agree one step later and stop at step 4
    single = fit(compose([*BASE, "trainer.max_epochs=3", "export_weights=false"]), output_dir=str(tmp_path / "single"))
    ddp = [
        *BASE,
        "trainer.max_epochs=3",
        "export_weights=false",
        "strategy=ddp",
        "trainer.devices=2",
        "strategy.timeout_s=60",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
    ]
    with pytest.raises(Interrupted):
        fit(compose([*ddp, *signal_at(2, rank=1)]), output_dir=str(tmp_path / "ddp"))
    stopped = results(tmp_path / "ddp")
    assert stopped["status"] == "interrupted" and stopped["steps"] == 4 and stopped["world_size"] == 2
    resumed = fit(compose([*ddp, "ckpt_path=last"]), output_dir=str(tmp_path / "ddp"))
    assert resumed["status"] == "completed" and resumed["steps"] == 9
    assert train_losses(tmp_path / "ddp") == pytest.approx(train_losses(tmp_path / "single"), rel=1e-5)
    assert resumed["metrics"]["test/acc"] == pytest.approx(single["metrics"]["test/acc"], rel=1e-5)


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    """The processes of ``pids`` still alive after up to ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline and alive(pids):
        time.sleep(0.25)
    return alive(pids)


def start_ddp_job(run_dir, group: bool = False) -> tuple[subprocess.Popen, set[int]]:
    """A 2-rank ddp CLI job that trains long enough; returns it once both ranks are training."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework.train",
            *BASE,
            "trainer.max_epochs=200",
            "trainer.limit_train_batches=1.0",
            "export_weights=false",
            "strategy=ddp",
            "trainer.devices=2",
            "strategy.timeout_s=30",
            "callbacks=model_checkpoint",
            "callbacks.model_checkpoint.monitor=null",
            f"hydra.run.dir={run_dir}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=group,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "metrics.csv").exists():
        time.sleep(0.2)
    assert (run_dir / "metrics.csv").exists(), "the job did not start training"
    return proc, tree(proc.pid)


@pytest.mark.parametrize("whole_group", [False, True])
def test_sigterm_to_the_launcher_of_a_ddp_job(tmp_path, whole_group):
    # whole_group: every process of the job at once, as scancel or a preemption delivers it
    proc, pids = start_ddp_job(tmp_path / "run", group=whole_group)
    if whole_group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    stopped = results(tmp_path / "run")
    assert stopped["status"] == "interrupted" and stopped["signal"] == "SIGTERM"
    manifest = json.loads((tmp_path / "run" / "checkpoints" / "last" / "manifest.json").read_text())
    assert manifest["step"] == stopped["steps"] and manifest["world_size"] == 2
    assert not wait_gone(pids, 15), f"still running 15 s after the launcher exited: {alive(pids)}"


def test_sigkill_of_the_launcher_leaves_no_process(tmp_path):
    proc, pids = start_ddp_job(tmp_path / "run")
    assert len(pids) >= 4  # launcher, fork server and two ranks
    proc.kill()
    proc.wait(timeout=10)
    assert not wait_gone(pids, 15), f"still running 15 s after the launcher died: {alive(pids)}"
    # the ranks stopped themselves, saved `last`, and say why
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "interrupted" and "the launcher (pid" in results["cause"]
    assert (tmp_path / "run" / "checkpoints" / "last" / "manifest.json").exists()


def test_a_rank_whose_fork_server_dies_gets_sigterm_not_torchs_sigint():
    # torch's process wrapper asks for SIGINT on the parent's death; pending beside a group's
    # SIGTERM, Python would handle SIGINT first and the run would record the wrong signal.
    import ctypes
    import importlib

    from framework.engine.signals import _term_on_parent_death

    libc = ctypes.CDLL(None, use_errno=True)

    def current() -> int:
        value = ctypes.c_int(0)
        libc.prctl(2, ctypes.byref(value))  # PR_GET_PDEATHSIG
        return value.value

    try:
        _term_on_parent_death()
        assert current() == 0  # nothing asked for: nothing set (srun, torchrun keep theirs)
        importlib.import_module("torch.multiprocessing.spawn")._prctl_pr_set_pdeathsig(signal.SIGINT)
        _term_on_parent_death()
        assert current() == signal.SIGTERM
    finally:
        libc.prctl(1, 0)  # PR_SET_PDEATHSIG: none, as the test process had


def _copies_to_the_ranks(pids: set[int], launcher: int, seconds: float = 1.5) -> None:
    """What a busy machine does to the ranks: the launcher's copy of the group's signal arrives
    late, while a rank writes results.json (within the window in which a copy is the same stop)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        for pid in pids - {launcher}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        time.sleep(0.05)


@pytest.mark.parametrize("whole_group,copies", [(False, False), (True, False), (True, True)])
def test_a_stop_after_training_ends_the_ddp_job_at_once_with_status_and_exit_code_agreeing(
    tmp_path, whole_group, copies
):
    # the final save is done, the (slow) test runs: a SIGTERM ends the job without waiting for the
    # test, nor for the elastic agent's 30 s grace period before it SIGKILLs ranks; late copies
    # of the signal (copies=True; a fresh-clone CI run lost results.json to one) while a slow
    # logger finalizes change nothing
    marker, run = tmp_path / "testing", tmp_path / "run"
    slow_logger = ["+logger.slow._target_=tests.helpers.probes.SlowFinalizeLogger"] if copies else []
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework.train",
            *BASE,
            "strategy=ddp",
            "trainer.devices=2",
            "strategy.timeout_s=30",
            "callbacks=model_checkpoint",
            *slow_logger,
            "+callbacks.slow._target_=tests.helpers.probes.SlowTest",
            f"+callbacks.slow.marker={marker}",
            f"hydra.run.dir={run}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not marker.exists():
        time.sleep(0.1)
    assert marker.exists(), "the job never reached its test"
    pids = tree(proc.pid)
    os.killpg(proc.pid, signal.SIGTERM) if whole_group else proc.send_signal(signal.SIGTERM)
    if copies:
        _copies_to_the_ranks(pids, proc.pid)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM  # well before the test's 60 s or the agent's 30 s
    stopped = results(run)
    assert stopped["status"] == "interrupted" and stopped["signal"] == "SIGTERM" and stopped["after_training"]
    assert stopped["steps"] == int(marker.read_text()) and stopped["checkpoint"].endswith("last")
    assert not wait_gone(pids, 15), f"still running 15 s after the launcher exited: {alive(pids)}"
