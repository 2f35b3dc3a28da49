"""``hydra/launcher=slurm``: submitit's SLURM launcher, made to fit the jobs it submits.

- Each job gets the layout its own config asks for (``trainer.num_nodes`` nodes,
  ``trainer.devices`` tasks per node), so device counts sweep in one command: the jobs are
  submitted as one array per layout.
- Before anything is submitted, a layout that no node of the partition can hold (tasks per
  node x CPUs per task > the node's CPUs, from ``sinfo``) is an error naming the keys.
- While the sweep waits, a job that SLURM will not schedule (``squeue``'s reason says why) is
  reported within seconds and the sweep's jobs are cancelled, instead of a silent wait.
- submitit's warnings about SLURM accounting (``sacct``), off on many clusters, stay off the console.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from omegaconf import OmegaConf

try:  # pip install 'framework[sweep]'; Hydra imports every plugin module, installed or not
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
except ImportError:  # pragma: no cover - hydra/launcher=slurm then fails on its missing defaults
    SlurmLauncher = object

log = logging.getLogger(__name__)

# squeue reasons for a pending job that waiting will not cure, and what to change.
NEVER = {
    "PartitionConfig": "the resources per node or the partition (hydra.launcher.cpus_per_task, "
    "gpus_per_node, mem_gb, partition)",
    "PartitionNodeLimit": "the node count (trainer.num_nodes) or the partition",
    "PartitionTimeLimit": "hydra.launcher.timeout_min or the partition",
    "BadConstraints": "hydra.launcher.constraint, gpus_per_node or mem_gb",
    "ReqNodeNotAvail": "hydra.launcher.partition, exclude or the node count",
    "InvalidAccount": "hydra.launcher.account",
    "InvalidQOS": "hydra.launcher.qos",
}


class _NoAccountingNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "sacct" not in record.getMessage()


def _quiet_accounting() -> None:
    """submitit polls ``sacct``, which prints "Slurm accounting storage is disabled" to the
    console every few seconds where accounting is off, and submitit logs a warning after it.
    Both are noise (the results arrive through files either way): silence sacct's stderr and
    the warning. (Patches the one watcher submitit's SLURM jobs share.)"""
    from submitit.slurm import slurm

    logging.getLogger("submitit").addFilter(_NoAccountingNoise())
    watcher = slurm.SlurmJob.watcher
    make = watcher._make_command
    if getattr(make, "quiet", False):
        return

    def quiet():
        command = make()
        return None if command is None else ["sh", "-c", '"$0" "$@" 2>/dev/null', *command]

    quiet.quiet = True
    watcher._make_command = quiet


class SlurmSweepLauncher(SlurmLauncher):
    poll_s = 2.0
    # A continued sweep's jobs keep their directories' numbers (hydra.sweep.subdir): one batch, any numbers.
    takes_job_numbers = True

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra_plugins.framework_sweeper.study import job_number  # (not at the console's start: --help)

        _quiet_accounting()
        layouts: dict[tuple[int, int], list[int]] = {}
        for i, overrides in enumerate(job_overrides):
            layouts.setdefault(self._layout(overrides), []).append(i)
        problems = [p for p in (fits(layout, self.params) for layout in layouts) if p]
        if problems:  # nothing submitted: the same exit as any config error
            log.error("%s", "; ".join(problems))
            print("\n".join(problems), file=sys.stderr)
            sys.exit(2)
        submitted = []
        for (nodes, devices), positions in layouts.items():
            executor = self._executor(nodes, devices)
            numbers = {i: job_number(job_overrides[i], initial_job_idx + i) for i in positions}
            args = [
                (
                    list(job_overrides[i]),
                    "hydra.sweep.dir",
                    numbers[i],
                    f"job_id_for_{numbers[i]}",
                    Singleton.get_state(),
                )
                for i in positions
            ]
            log.info("Submitting %d job(s) of %d node(s) x %d task(s)", len(args), nodes, devices)
            submitted += zip(positions, executor.map_array(self, *zip(*args)))
        jobs = [job for _, job in sorted(submitted, key=lambda pair: pair[0])]
        watcher = PendingWatcher([job.job_id for job in jobs], self.poll_s)
        watcher.start()
        try:
            return [job.results()[0] for job in jobs]
        except Exception:
            if watcher.verdict:  # logged when it was found; the cancelled jobs' errors would hide it
                print(watcher.verdict, file=sys.stderr)
                sys.exit(1)
            raise
        finally:
            watcher.stop()

    def _layout(self, overrides: Sequence[str]) -> tuple[int, int]:
        """(nodes, tasks per node) of the job: its own composed config decides."""
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        trainer = config.get("trainer") or {}
        return int(trainer.get("num_nodes") or 1), int(trainer.get("devices") or 1)

    def _executor(self, nodes: int, devices: int):
        """A submitit executor with the launcher's parameters and this layout (as the plugin builds it)."""
        import submitit

        params = {**self.params, "nodes": nodes, "tasks_per_node": devices}
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(
            cluster="slurm", folder=params["submitit_folder"], slurm_max_num_timeout=params.get("max_num_timeout", 0)
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{k if k in base else f"slurm_{k}": v for k, v in params.items() if k not in init_keys}
        )
        return executor


def node_cpus(partition: str | None) -> int | None:
    """The CPUs of the smallest node of ``partition`` (the default one when None), from sinfo."""
    command = ["sinfo", "-h", "-o", "%c"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = [int(c.rstrip("+")) for c in out if c.rstrip("+").isdigit()]
    return min(counts) if counts else None


def fits(layout: tuple[int, int], params: dict[str, Any]) -> str | None:
    """The problem of a layout whose tasks need more CPUs than a node has, before submitting."""
    nodes, devices = layout
    per_task = params.get("cpus_per_task") or 1
    available = node_cpus(params.get("partition"))
    if available is not None and devices * per_task > available:
        return (
            f"hydra.launcher: a job of {devices} task(s) per node (trainer.devices={devices}) x cpus_per_task="
            f"{per_task} needs {devices * per_task} CPUs per node; the nodes of partition "
            f"{params.get('partition') or '(default)'} have {available}. Lower hydra.launcher.cpus_per_task "
            f"(null = SLURM's default, 1) or trainer.devices"
        )
    return None


class PendingWatcher(threading.Thread):
    """Polls squeue for the sweep's jobs; one pending for a reason waiting will not cure is
    reported, and the sweep's jobs are cancelled (``verdict`` says why)."""

    def __init__(self, job_ids: list[str], poll_s: float):
        super().__init__(daemon=True, name="slurm-pending-watcher")
        self.job_ids, self.poll_s = job_ids, poll_s
        self.verdict: str | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            out = subprocess.run(
                ["squeue", "-h", "-j", ",".join(self.job_ids), "-o", "%i %T %r"], capture_output=True, text=True
            ).stdout
            for line in out.splitlines():
                job, state, reason = (line.split(None, 2) + ["", ""])[:3]
                if state == "PENDING" and reason in NEVER:
                    self.verdict = (
                        f"SLURM will not run job {job} (squeue reason: {reason}); change "
                        f"{NEVER[reason]}. The sweep's jobs were cancelled."
                    )
                    log.error("%s", self.verdict)
                    subprocess.run(["scancel", *self.job_ids], capture_output=True)
                    return

    def stop(self) -> None:
        self._stopping.set()
