"""A rank that dies is named with how it died; restarts resume; a full disk or a busy port is named."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from framework import compose, fit
from framework.engine.checkpoint_files import verify_checkpoint
from tests.helpers.configs import BASE

DDP = [*BASE, "trainer.max_epochs=3", "strategy=ddp", "trainer.devices=2", "strategy.timeout_s=30"]
KILL = [
    "+callbacks.kill._target_=tests.helpers.probes.SignalAt",
    "+callbacks.kill.step=3",
    "+callbacks.kill.signal=SIGKILL",
]


@pytest.mark.parametrize("rank, kill", [(1, "SIGKILL"), (0, "SIGKILL"), (1, "SIGABRT")])
def test_the_rank_killed_first_is_named_with_the_job_fields(tmp_path, rank, kill):
    # killed at step 4, after the first epoch's checkpoint (step 3): the error says how to go on;
    # a fatal signal it could dump its stack at (a C++ abort) names where it was
    where = (
        f"; its threads' stacks are in {tmp_path}/ranks/1/train.log \\(last: File .*probes.py"
        if kill == "SIGABRT"
        else ""
    )
    with pytest.raises(
        RuntimeError,
        match=f"rank {rank} failed: killed by {kill}[^;]*{where}.* holds step 3: resume with ckpt_path=last",
    ):
        overrides = [
            *DDP,
            *KILL,
            "callbacks.kill.step=4",
            f"+callbacks.kill.rank={rank}",
            f"callbacks.kill.signal={kill}",
        ]
        fit(compose(overrides), output_dir=str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and results["failed_rank"] == rank and kill in results["error"]
    assert "traceback" not in results  # a killed rank has none; rank 0's, of losing it, is not the failure's
    assert (results["strategy"], results["world_size"], results["devices"]) == ("ddp", 2, 2)
    assert results["checkpoint_step"] == 3 and results["checkpoint"] == str(tmp_path / "checkpoints" / "last")


def test_a_restarted_job_resumes_from_its_last_checkpoint_to_the_same_weights(tmp_path):
    ckpt = [
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=2",
    ]
    straight = fit(compose([*DDP, *ckpt]), output_dir=str(tmp_path / "straight"))
    restarted = fit(
        compose([*DDP, *ckpt, *KILL, "+callbacks.kill.rank=1", "trainer.max_restarts=1"]),
        output_dir=str(tmp_path / "restarted"),
    )
    assert restarted["status"] == "completed" and restarted["steps"] == straight["steps"] == 9
    assert "Restart 1: resuming from" in (tmp_path / "restarted" / "train.log").read_text()
    ref, got = torch.load(tmp_path / "straight" / "model.pt"), torch.load(tmp_path / "restarted" / "model.pt")
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-6, atol=1e-7, msg=name)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 160 KiB tmpfs: room for a few checkpoints of a small MLP, then ENOSPC."""
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_is_named_and_the_saved_checkpoints_stay_whole(tmp_path, tiny_disk):
    cfg = compose(
        [
            *BASE,
            "trainer.max_epochs=3",
            "export_weights=false",
            "callbacks=model_checkpoint",
            "callbacks.model_checkpoint.monitor=null",
            "callbacks.model_checkpoint.save_top_k=-1",
            "callbacks.model_checkpoint.every_n_train_steps=1",
            f"callbacks.model_checkpoint.dirpath={tiny_disk}",
        ]
    )
    with pytest.raises(OSError, match="the disk is full: saving checkpoint") as err:
        fit(cfg, output_dir=str(tmp_path / "run"))
    assert str(tiny_disk) in str(err.value)
    left = sorted(p.name for p in tiny_disk.iterdir())
    assert left and not [n for n in left if n.startswith(".tmp-")], left
    saved = [tiny_disk / n for n in left if not n.startswith(".") and (tiny_disk / n).is_dir()]
    assert saved and all(verify_checkpoint(p) == [] for p in saved)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and "the disk is full" in results["error"]


def test_a_busy_master_port_is_named(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "framework.train",
                *BASE,
                "strategy=ddp",
                "strategy.timeout_s=20",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    assert proc.returncode != 0
    assert f"MASTER_PORT: the rendezvous port 127.0.0.1:{port} is already in use" in proc.stdout + proc.stderr


def test_torchrun_max_restarts_resumes_the_run_from_its_last_checkpoint(tmp_path):
    ckpt = [
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=2",
    ]
    straight = fit(compose([*DDP, *ckpt]), output_dir=str(tmp_path / "straight"))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "-m",
            "framework.train",
            *DDP,
            *ckpt,
            *KILL,
            "+callbacks.kill.rank=1",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == straight["steps"] == 9
    assert "Restart 1: resuming from" in (tmp_path / "run" / "train.log").read_text()
    ref, got = torch.load(tmp_path / "straight" / "model.pt"), torch.load(tmp_path / "run" / "model.pt")
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-6, atol=1e-7, msg=name)


def test_a_failed_ddp_resume_keeps_the_completed_results(tmp_path):
    run = [*DDP, "trainer.max_epochs=1", "callbacks=model_checkpoint", "callbacks.model_checkpoint.monitor=null"]
    fit(compose(run), output_dir=str(tmp_path))
    shard = next((tmp_path / "checkpoints" / "last").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    shard.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=f"the contents of {shard.name} changed"):
        fit(compose([*run, "trainer.max_epochs=2", "ckpt_path=last"]), output_dir=str(tmp_path))
    assert json.loads((tmp_path / "results.json").read_text())["status"] == "completed"
    assert json.loads((tmp_path / "results.failed.json").read_text())["status"] == "failed"


def test_a_damaged_shard_under_a_multi_rank_evaluate_is_a_failure_named_by_its_rank_not_an_interruption(tmp_path):
    """The rank that finds the damage fails; the agent's SIGTERM to the others is its teardown, not a stop."""
    from framework.evaluate import evaluate
    from tests.helpers.configs import GPT_TINY

    run = [
        "experiment=gpt_text",
        *GPT_TINY,
        "strategy=tp",
        "trainer.devices=2",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "predict=false",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
    ]
    fit(compose(run), output_dir=str(tmp_path / "run"))
    shard = tmp_path / "run" / "checkpoints" / "last" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="rank [01] failed: .*the contents of __1_0.distcp changed"):
        evaluate(str(tmp_path / "run" / "checkpoints" / "last"), output_dir=str(tmp_path / "eval"))
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["status"] == "failed" and "CRC-32 mismatch" in results["error"] and "signal" not in results
