"""A one-node SLURM cluster on this machine, for trying the framework's SLURM paths for real.

    python scripts/slurm_cluster.py start [DIR]    # prints `export SLURM_CONF=DIR/slurm.conf`
    python scripts/slurm_cluster.py stop [DIR]

Needs Debian's (or Ubuntu's) packages: ``apt-get install slurmctld slurmd slurm-client``. The
cluster runs as root with no authentication (auth/none): for a test machine only. The tests
use it as a fixture (tests/slurm/conftest.py); ``.ci/run`` installs the packages.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DIR = Path("/tmp/framework-slurm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_conf(directory: Path) -> Path:
    """slurm.conf for one node with every CPU of this machine, state and logs under ``directory``."""
    host = socket.gethostname()
    for sub in ("state", "spool"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    conf = directory / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=framework",
                f"SlurmctldHost={host}",
                "AuthType=auth/none",
                "CredType=cred/none",
                "SlurmUser=root",
                "SlurmdUser=root",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=none",
                "SwitchType=switch/none",
                "JobRequeue=1",
                "ReturnToService=2",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/none",
                "SchedulerType=sched/backfill",
                "KillWait=10",
                "MinJobAge=300",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                f"StateSaveLocation={directory / 'state'}",
                f"SlurmdSpoolDir={directory / 'spool'}",
                f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
                f"SlurmdPidFile={directory / 'slurmd.pid'}",
                f"SlurmctldLogFile={directory / 'slurmctld.log'}",
                f"SlurmdLogFile={directory / 'slurmd.log'}",
                f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


def available() -> bool:
    return all(shutil.which(tool) for tool in ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "scontrol"))


def start(directory: Path = DEFAULT_DIR, timeout: float = 60.0) -> dict:
    """Start slurmctld and slurmd; wait until the node is idle; return the environment to use."""
    stop(directory)
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SLURM_CONF": str(write_conf(directory))}
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon, "-f", env["SLURM_CONF"]], env=env, check=True, capture_output=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
        if state == "idle":
            return {"SLURM_CONF": env["SLURM_CONF"]}
        time.sleep(0.5)
    raise RuntimeError(
        f"the SLURM node is not idle after {timeout:.0f} s (sinfo: {state!r}); "
        f"see {directory}/slurmctld.log and slurmd.log"
    )


def stop(directory: Path = DEFAULT_DIR) -> None:
    """Stop the daemons started from ``directory`` (their pid files), and every job they ran."""
    _cancel_jobs(directory)
    for daemon in ("slurmd", "slurmctld"):
        pid_file = directory / f"{daemon}.pid"
        if not pid_file.exists():
            continue
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, 15)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)
        except (ValueError, ProcessLookupError):
            pass
        pid_file.unlink(missing_ok=True)


def _cancel_jobs(directory: Path, timeout: float = 30.0) -> None:
    """Cancel the jobs still queued or running (a failed test's), and wait until they are gone:
    stopping slurmd first would leave their processes running."""
    conf = directory / "slurm.conf"
    if not (conf.exists() and (directory / "slurmctld.pid").exists()):
        return
    env = {**os.environ, "SLURM_CONF": str(conf)}
    left = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, timeout=30)
    if left.returncode != 0 or not left.stdout.strip():
        return
    subprocess.run(["scancel", "--full", *left.stdout.split()], env=env, capture_output=True, timeout=30)
    deadline = time.time() + timeout  # SIGTERM, then SIGKILL after KillWait (10 s)
    while time.time() < deadline:
        if not subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.5)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    where = Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_DIR
    if command == "start":
        if not available():
            sys.exit("SLURM is not installed: apt-get install slurmctld slurmd slurm-client")
        print(f"export SLURM_CONF={start(where)['SLURM_CONF']}")
    elif command == "stop":
        stop(where)
    else:
        sys.exit(__doc__)
