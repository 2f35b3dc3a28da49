"""A live one-node SLURM cluster (scripts/slurm_cluster.py) for the tests of this folder.

Without the SLURM packages these tests skip, except where FRAMEWORK_REQUIRE_SLURM=1 (CI sets
it after installing them): there a missing cluster is a failure, never a silent skip."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from scripts import slurm_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    if not slurm_cluster.available():
        if os.environ.get("FRAMEWORK_REQUIRE_SLURM") == "1":
            pytest.fail(
                "FRAMEWORK_REQUIRE_SLURM=1 but SLURM is not installed (apt-get install slurmctld slurmd slurm-client)"
            )
        pytest.skip("SLURM is not installed (apt-get install slurmctld slurmd slurm-client)")
    directory = tmp_path_factory.mktemp("slurm")
    env = slurm_cluster.start(directory)
    os.environ.update(env)  # srun, sbatch, squeue and submitit find the cluster through SLURM_CONF
    yield Cluster(directory)
    slurm_cluster.stop(directory)
    os.environ.pop("SLURM_CONF", None)


class Cluster:
    def __init__(self, directory: Path):
        self.directory = directory

    def run(self, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kwargs)

    def state(self, job_id: str) -> str | None:
        """The job's state as squeue shows it ("" once it left the queue; None when squeue could
        not tell: slurmctld busy, as just after a requeue)."""
        proc = self.run("squeue", "-h", "-j", job_id, "-o", "%T")
        if proc.returncode != 0:
            return "" if "Invalid job id" in proc.stderr else None
        return proc.stdout.strip()

    def wait(self, job_id: str, until: str = "", timeout: float = 240) -> None:
        """Wait until the job's state is ``until`` ("" = finished and gone from squeue: seen
        three times in a row, so that an empty answer of a busy slurmctld does not end the wait)."""
        deadline, seen = time.time() + timeout, 0
        while time.time() < deadline:
            seen = seen + 1 if self.state(job_id) == until else 0
            if seen >= (3 if until == "" else 1):
                return
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} not {until or 'finished'} after {timeout} s: {self.state(job_id)}")

    def start_requeued(self, job_id: str) -> None:
        """Start a requeued job now rather than after the ~2 minutes SLURM holds it. Its old run's
        credential is revoked at one-second resolution, and a new credential made within that second
        counts as revoked too ("Killing non-startable batch job: Job credential revoked", seen in one
        of three runs): so wait for the node to be idle again, then for the clock to pass the next
        second, before letting it start."""
        self.wait(job_id, until="PENDING")
        deadline = time.time() + 60
        while self.run("sinfo", "-h", "-o", "%T").stdout.strip() != "idle" and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(2.0 - time.time() % 1.0)  # no event to wait on: a timestamp must change second
        proc = self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        assert proc.returncode == 0, proc.stderr

    def log(self, job_id: str) -> str:
        """slurmctld's log lines about this job, for a failure's message."""
        log = (self.directory / "slurmctld.log").read_text(errors="replace").splitlines()
        return "\n".join(line for line in log if f"JobId={job_id}" in line)
