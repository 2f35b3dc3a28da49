"""Kill real training jobs in every way the README's "When things fail" table lists, and print
what happened: exit code, seconds from the blow to the exit, the status and step in
results.json, the step of checkpoints/last, and the processes of the job still alive 15 s later.

    python scripts/failure_drill.py [--only NAME ...]     (from the repository root)

Each scenario starts ``python -m framework.train`` (a small MLP on the bundled digits, long
enough to be killed while it trains) in a temporary directory, waits until it has trained a
few steps (or once it tests, after training), then delivers the blow from outside, as a user or
a cluster would, and judges each outcome against the README's table: good, acceptable (right,
but slower than 5 s), bad; the counts close the table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = [
    "experiment=digits_mlp",
    "trainer.max_epochs=500",
    "trainer.log_every_n_steps=1",
    "trainer.accelerator=cpu",
    "trainer.enable_progress_bar=false",
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "logger=csv",
    "strategy.timeout_s=30",
]
DDP = ["strategy=ddp", "trainer.devices=2"]
# a pipeline of two stages (the tests' transformer): each stage a rank
PP = [
    "experiment=gpt_text",
    "model=gpt/tiny",
    "datamodule.batch_size=8",
    "datamodule.seq_len=32",
    "predict=false",
    "trainer.max_steps=100000",
    "strategy=pp",
    "trainer.devices=2",
]
# DeepSpeed's ZeRO-3 (parameters partitioned: every forward a collective)
DEEPSPEED = ["strategy=deepspeed", "strategy.stage=3", "trainer.devices=2"]


def tree(pid: int) -> set[int]:
    """``pid`` and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.add(pid)
        except OSError:
            pass
    return out


def rank_pid(pids: set[int], run_dir: Path, rank: int, launcher: int) -> int:
    """The process of ``rank`` among ``pids``: the one besides the launcher that has the rank's log open."""
    log = run_dir / "train.log" if rank == 0 else run_dir / "ranks" / str(rank) / "train.log"
    for pid in sorted(pids):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(log) for fd in os.listdir(f"/proc/{pid}/fd")):
                if pid != launcher:  # the launcher has train.log open too
                    return pid
        except OSError:
            continue
    raise RuntimeError(f"no process of rank {rank}")


def scenario(name: str, extra: list[str], blow, wait_for: str | None = None) -> dict:
    """Run one job, strike it with ``blow(proc, pids, run_dir)`` after a few steps (or once the file
    ``wait_for`` appears in its run directory), report what happened."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"drill-{name}-"))
    short = ["trainer.max_epochs=2"] if wait_for else []  # reach the test stage
    base = (
        [o for o in RUN if not o.startswith("experiment=")] if any(o.startswith("experiment=") for o in extra) else RUN
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "framework.train", *base, *short, *extra, f"hydra.run.dir={run_dir}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    metrics, deadline = run_dir / "metrics.csv", time.time() + 180
    while (
        time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 4) and not wait_for
    ):
        time.sleep(0.1)
    while wait_for and time.time() < deadline and not (run_dir / wait_for).exists():
        time.sleep(0.1)
    pids = tree(proc.pid)
    struck = time.time()
    blow(proc, pids, run_dir)
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = "hung"
    took = time.time() - struck
    time.sleep(15)
    results = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    manifest = run_dir / "checkpoints" / "last" / "manifest.json"
    last = json.loads(manifest.read_text())["step"] if manifest.exists() else None
    return {
        "scenario": name,
        "exit": code,
        "exit_s": round(took, 1),
        "status": results.get("status"),
        "step": results.get("steps"),
        "last": last,
        "blamed": results.get("failed_rank"),
        "error": (results.get("error") or results.get("signal") or "")[:60],
        "left": len(alive(pids)),
    }


def send(sig):
    return lambda proc, pids, run_dir: proc.send_signal(sig)


def group(sig):
    return lambda proc, pids, run_dir: os.killpg(proc.pid, sig)


def kill_rank(rank: int):
    return lambda proc, pids, run_dir: os.kill(rank_pid(pids, run_dir, rank, proc.pid), signal.SIGKILL)


# A stop after the final save: the (slow) test runs when the blow comes.
TESTING = ["+callbacks.slow._target_=tests.helpers.probes.SlowTest", "+callbacks.slow.marker=${output_dir}/testing"]
STOPPED = {"status": "interrupted", "last_is_step": True}
AFTER = {"status": "interrupted", "last_is_step": False}
FAILED = {"exit": 1, "status": "failed", "last_is_step": False}

# name: (overrides, the blow, what the README's "When things fail" table promises)
SCENARIOS = {
    "sigterm-single": ([], send(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "sigint-single": ([], send(signal.SIGINT), {**STOPPED, "exit": 130}),
    "sigusr1-single": (["trainer.stop_on_sigusr1=true"], send(signal.SIGUSR1), {**STOPPED, "exit": 138}),
    "sigterm-ddp": (DDP, send(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "sigint-ddp": (DDP, send(signal.SIGINT), {**STOPPED, "exit": 130}),
    "ctrl-c-group-ddp": (DDP, group(signal.SIGINT), {**STOPPED, "exit": 130}),
    "scancel-group-ddp": (DDP, group(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "sigusr1-ddp": ([*DDP, "trainer.stop_on_sigusr1=true"], send(signal.SIGUSR1), {**STOPPED, "exit": 138}),
    "sigkill-rank1-ddp": (DDP, kill_rank(1), {**FAILED, "blamed": 1}),
    "sigkill-rank0-ddp": (DDP, kill_rank(0), {**FAILED, "blamed": 0}),
    "sigkill-launcher-ddp": (DDP, send(signal.SIGKILL), {"exit": -9, "status": "interrupted", "last_is_step": True}),
    "sigterm-during-test-single": (TESTING, send(signal.SIGTERM), {**AFTER, "exit": 143}),
    "sigterm-during-test-ddp": ([*DDP, *TESTING], send(signal.SIGTERM), {**AFTER, "exit": 143}),
    "scancel-during-test-ddp": ([*DDP, *TESTING], group(signal.SIGTERM), {**AFTER, "exit": 143}),
    "sigterm-pp": (PP, send(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "scancel-group-pp": (PP, group(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "sigkill-rank1-pp": (PP, kill_rank(1), {**FAILED, "blamed": 1}),
    "sigkill-launcher-pp": (PP, send(signal.SIGKILL), {"exit": -9, "status": "interrupted", "last_is_step": True}),
    "sigterm-deepspeed": (DEEPSPEED, send(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "scancel-group-deepspeed": (DEEPSPEED, group(signal.SIGTERM), {**STOPPED, "exit": 143}),
    "sigkill-rank1-deepspeed": (DEEPSPEED, kill_rank(1), {**FAILED, "blamed": 1}),
    "sigkill-launcher-deepspeed": (
        DEEPSPEED,
        send(signal.SIGKILL),
        {"exit": -9, "status": "interrupted", "last_is_step": True},
    ),
    "scancel-during-test-deepspeed": ([*DEEPSPEED, *TESTING], group(signal.SIGTERM), {**AFTER, "exit": 143}),
}
# Damage and planted files: a run trained once per layout, a copy of it damaged, then the command a
# user would run; judged by its exit code, results.json's status and what it says (the damage).
TP_RUN = [*PP[:5], "strategy=tp", "trainer.devices=2", "trainer.max_steps=4", "trainer.val_check_interval=2"]
SHORT = [
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=3",
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "logger=csv",
]


def _flip(path_in_checkpoint: str):
    def damage(run: Path) -> None:
        file = next((run / "checkpoints" / "last").glob(path_in_checkpoint))
        data = bytearray(file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))

    return damage


def _escaping_metadata(run: Path) -> None:
    import pickle

    from framework.engine.checkpoint_files import write_manifest

    ckpt = run / "checkpoints" / "last"
    metadata = pickle.loads((ckpt / ".metadata").read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = f"../../../elsewhere/{info.relative_path}"
    (ckpt / ".metadata").write_bytes(pickle.dumps(metadata))
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt, step=0, epoch=0, strategy="single", world_size=1)


def _planted_link(name: str):
    def damage(run: Path) -> None:
        outside = run.parent / f"{run.name}-outside"
        outside.mkdir()
        (run / "checkpoints" / name).symlink_to(outside, target_is_directory=True)

    return damage


EVALUATE = ["-m", "framework.evaluate", "ckpt_path={run}/checkpoints/last"]
RESUME = ["-m", "framework.train", "hydra.run.dir={run}", "ckpt_path=last", "trainer.max_epochs=3"]
# name: (the run's overrides, the damage, the command, (exit, status, words its error must hold))
DAMAGES = {
    "evaluate-flipped-shard-tp": (TP_RUN, _flip("__1_0.distcp"), EVALUATE, (1, "failed", "CRC-32 mismatch")),
    "evaluate-flipped-metadata": (SHORT, _flip(".metadata"), EVALUATE, (2, None, "CRC-32 mismatch")),
    "evaluate-truncated-trainer-pt": (
        SHORT,
        lambda r: (r / "checkpoints/last/trainer.pt").write_bytes(b"PK\x03\x04"),
        EVALUATE,
        (2, None, "trainer.pt has 4 bytes"),
    ),
    "evaluate-escaping-metadata": (
        SHORT,
        _escaping_metadata,
        EVALUATE,
        (2, None, "outside the checkpoint's directory"),
    ),
    "resume-planted-tmp-link": (SHORT, _planted_link(".tmp-last"), RESUME, (0, "completed", "")),
    "resume-planted-old-link": (SHORT, _planted_link(".old-last"), RESUME, (0, "completed", "")),
}


def damage_scenario(name: str, run_args: list[str], damage, command: list[str], expect: tuple) -> dict:
    """Train the run, damage it, run ``command`` on it; the outcome and its verdict (good or bad)."""
    run = Path(tempfile.mkdtemp(prefix=f"drill-{name}-")) / "run"
    base = (
        [o for o in RUN if not o.startswith(("experiment=", "trainer.max_epochs"))]
        if any(o.startswith("experiment=") for o in run_args)
        else [o for o in RUN if "max_epochs" not in o]
    )
    subprocess.run(
        [sys.executable, "-m", "framework.train", *base, *run_args, f"hydra.run.dir={run}"],
        capture_output=True,
        check=True,
    )
    damage(run)
    proc = subprocess.run([sys.executable, *(a.format(run=run) for a in command)], capture_output=True, text=True)
    evaluated = sorted(run.glob("eval/*/results.json"))
    results_file = evaluated[-1] if evaluated else run / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() and (evaluated or command is RESUME) else {}
    said = results.get("error") or (proc.stderr.strip().splitlines() or [""])[-1]
    code, status, words = expect
    outside = run.parent / f"{run.name}-outside"
    clean = not outside.exists() or not any(outside.iterdir())
    good = proc.returncode == code and results.get("status") == status and words in said and clean
    return {
        "exit": proc.returncode,
        "status": results.get("status"),
        "said": said,
        "verdict": "good" if good else "bad",
    }


FAST_S, SLOW_S = 5.0, 35.0  # a blow is answered within FAST_S (good) or at least within SLOW_S (acceptable)


def verdict(row: dict, expect: dict) -> str:
    """good: what the README promises, within FAST_S; acceptable: the same, slower; bad: anything else."""
    right = (
        row["exit"] == expect["exit"]
        and row["status"] == expect["status"]
        and row["left"] == 0
        and (not expect["last_is_step"] or row["last"] == row["step"])
        and expect.get("blamed", row["blamed"]) == row["blamed"]
    )
    if not right or row["exit_s"] > SLOW_S:
        return "bad"
    return "good" if row["exit_s"] <= FAST_S or expect["status"] == "failed" else "acceptable"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[*SCENARIOS, *DAMAGES], choices=[*SCENARIOS, *DAMAGES])
    args = parser.parse_args()
    columns = ["scenario", "exit", "exit_s", "status", "step", "last", "blamed", "error", "left", "verdict"]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    counts = {"good": 0, "acceptable": 0, "bad": 0}
    for name in (n for n in args.only if n in SCENARIOS):
        extra, blow, expect = SCENARIOS[name]
        row = scenario(name, extra, blow, wait_for="testing" if TESTING[0] in extra else None)
        row["verdict"] = verdict(row, expect)
        counts[row["verdict"]] += 1
        print("| " + " | ".join(str(row[c]) for c in columns) + " |", flush=True)
    for name in (n for n in args.only if n in DAMAGES):
        row = damage_scenario(name, *DAMAGES[name])
        counts[row["verdict"]] += 1
        print(f"| {name} | {row['exit']} | {row['status']} | {row['verdict']}: {row['said'][:110]} |", flush=True)
    print(f"\n{len(args.only)} scenarios: " + ", ".join(f"{n} {k}" for k, n in counts.items()))


if __name__ == "__main__":
    main()
