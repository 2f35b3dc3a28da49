"""Launching: torchrun multi-node on one machine, SLURM detection, failures named by rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from framework import compose, fit
from framework.config.environment import detect_environment, first_host, free_port
from tests.helpers.configs import BASE, train_losses


def test_two_torchrun_agents_as_two_nodes_match_single_device(tmp_path):
    single = fit(compose(BASE + ["strategy=single"]), output_dir=str(tmp_path / "single"))
    run_dir, port = tmp_path / "multinode", free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["TMPDIR"] = str(tmp_path / "tmp")  # where rank 1's scratch Hydra dir goes, and is removed from
    (tmp_path / "tmp").mkdir()
    args = [a for a in BASE if not a.startswith("export_weights")]
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "framework.train",
                *args,
                "strategy=ddp",
                "trainer.num_nodes=2",
                "strategy.timeout_s=120",
                f"hydra.run.dir={run_dir}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    outputs = [a.communicate(timeout=240)[0] for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs
    results = json.loads((run_dir / "results.json").read_text())
    assert results["world_size"] == 2 and results["num_nodes"] == 2 and results["strategy"] == "ddp"
    assert train_losses(run_dir) == pytest.approx(train_losses(tmp_path / "single"), rel=1e-5)
    assert results["metrics"]["test/acc"] == pytest.approx(single["metrics"]["test/acc"], rel=1e-5)
    # one job directory, owned by rank 0; rank 1 logs under it
    assert (run_dir / "ranks" / "1" / "train.log").exists()
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("framework-rank")]


def test_slurm_variables_make_a_rank():
    environ = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_NODELIST": "gpu[07-08]",
    }
    env = detect_environment(environ)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 1, 4, 2)
    assert environ["MASTER_ADDR"] == "gpu07" and environ["MASTER_PORT"] == str(15000 + 4242 % 20000)
    # a batch script's shell (no job step) is not a rank
    assert detect_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None
    assert first_host("node1,node2") == "node1" and first_host("a[1,3-4]") == "a1"


def test_submitit_local_variables_make_a_rank():
    environ = {
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_JOB_ID": "777",
    }
    env = detect_environment(environ)
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (1, 1, 2, 2)
    assert environ["MASTER_ADDR"] == "127.0.0.1" and environ["MASTER_PORT"] == str(15000 + 777)
    assert detect_environment({"SUBMITIT_LOCAL_GLOBALID": "0", "SUBMITIT_LOCAL_NTASKS": "1"}) is None


def test_torchrun_variables_make_a_rank():
    env = detect_environment(
        {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1"}
    )
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (1, 0, 2, 1)


def test_a_failing_rank_fails_the_job_and_is_named(tmp_path):
    # only rank 1 fails to build its model; the job fails and says which rank
    (tmp_path / "boom.py").write_text(
        "import os, torch\n"
        "class Boom(torch.nn.Module):\n"
        "    def __init__(self, **kw):\n"
        "        super().__init__()\n"
        "        if os.environ.get('RANK') == '1':\n"
        "            raise RuntimeError('model construction failed on purpose')\n"
        "        self.lin = torch.nn.Linear(64, 10)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x.flatten(1))\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            *BASE,
            "strategy=ddp",
            "trainer.devices=2",
            "model._target_=boom.Boom",
            "strategy.timeout_s=30",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "model construction failed on purpose" in text and "rank" in text.lower()
    rank1_log = (tmp_path / "run" / "ranks" / "1" / "train.log").read_text()
    assert "rank 1 failed:" in rank1_log and "model construction failed on purpose" in rank1_log
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and results["failed_rank"] == 1
    assert "model construction failed on purpose" in results["error"]


def test_ranks_see_the_environment_of_each_launch(tmp_path, monkeypatch):
    # Ranks fork from a server process started by the first launch; a variable set (or
    # removed) afterwards must still reach the next job's ranks.
    for i, value in enumerate(["first", "second", None]):
        if value is None:
            monkeypatch.delenv("FRAMEWORK_PROBE")
        else:
            monkeypatch.setenv("FRAMEWORK_PROBE", value)
        fit(
            compose(
                BASE
                + [
                    "strategy=ddp",
                    "trainer.devices=2",
                    "logger=none",
                    "export_weights=false",
                    "+callbacks.probe._target_=tests.helpers.probes.EnvProbe",
                    f"+callbacks.probe.out_dir={tmp_path / 'probe' / str(i)}",
                ]
            ),
            output_dir=str(tmp_path / str(i)),
        )
        for rank in (0, 1):
            assert (tmp_path / "probe" / str(i) / f"rank{rank}").read_text() == (value or "<unset>")
