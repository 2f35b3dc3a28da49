"""A notebook, as its users run one: a real Jupyter kernel (ipykernel) driven by nbclient, a
model class defined in a cell, trained on 2 ranks (the ranks fork from the kernel, since no
other start could import a cell's class), fit after fit in the same kernel, one interrupted
by the kernel's interrupt (the notebook's stop button) and resumed, then a clean shutdown."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

SETUP = """
import json, os, signal, logging, threading, time
import torch
from framework import compose, fit

class Net(torch.nn.Module):                      # defined in a cell: __main__.Net
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, num_classes)

    def forward(self, x):
        return self.head(self.body(x))

class Pids:                                      # records each rank's process, for the shutdown check
    def on_fit_start(self, trainer):
        open(f"pids/{os.getpid()}", "w").close()

class SlowSteps(Pids):                           # slow enough to be interrupted halfway
    def on_train_step_end(self, trainer, loss):
        time.sleep(0.3)
        if trainer.global_step == 3:
            open("training", "w").close()

os.makedirs("pids", exist_ok=True)
BASE = ["experiment=digits_mlp", "model._target_=__main__.Net", "~model.input_shape", "~model.hidden_sizes",
        "~model.dropout", "trainer.max_epochs=2", "trainer.limit_train_batches=6", "+callbacks.pids._target_=__main__.Pids"]

def state():
    names = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1")
    return {"signals": [repr(signal.getsignal(getattr(signal, n))) for n in names], "env": dict(os.environ),
            "logging": [repr(h) for h in logging.getLogger().handlers], "threads": sorted(t.name for t in threading.enumerate()),
            "torch_threads": torch.get_num_threads()}

before = state()

def changed():  # what a fit left different in this process ({}: nothing)
    now = state()
    return {k: [before[k], now[k]] if k != "env" else sorted(set(before[k].items()) ^ set(now[k].items()))
            for k in now if now[k] != before[k]}
"""
FITS = """
metrics = {}
for strategy in ("single", "ddp", "fsdp"):
    devices = 1 if strategy == "single" else 2
    results = fit(compose(BASE + [f"strategy={strategy}", f"trainer.devices={devices}"]), output_dir=f"out/{strategy}")
    metrics[strategy] = {**results["metrics"], "world_size": results["world_size"]}
print("METRICS", json.dumps(metrics))
"""
SECOND = """
again = fit(compose(BASE + ["strategy=ddp", "trainer.devices=2"]), output_dir="out/ddp", overwrite=True)
print("AGAIN", json.dumps(again["metrics"]), json.dumps(changed()))
"""
INTERRUPTED = """
from framework.engine.signals import Interrupted
long = BASE + ["strategy=ddp", "trainer.devices=2", "trainer.max_epochs=50", "trainer.limit_train_batches=1.0",
               "+callbacks.slow._target_=__main__.SlowSteps"]
try:
    fit(compose(long), output_dir="out/interrupted")
except Interrupted as err:
    print("INTERRUPTED", json.dumps(err.results), json.dumps(changed()))
"""
RESUMED = """
resumed = fit(compose(long + ["ckpt_path=last", "trainer.max_epochs=1", "~callbacks.slow"]), output_dir="out/interrupted")
print("RESUMED", json.dumps(resumed), json.dumps(changed()))
"""


def _notebook() -> nbformat.NotebookNode:
    cells = [textwrap.dedent(code).strip() for code in (SETUP, FITS, SECOND, INTERRUPTED, RESUMED)]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


def _printed(cell, tag: str) -> list:
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    line = next(line for line in text.splitlines() if line.startswith(tag + " "))
    rest, values, decoder = line.split(" ", 1)[1], [], json.JSONDecoder()
    while rest.strip():
        value, end = decoder.raw_decode(rest.strip())
        values.append(value)
        rest = rest.strip()[end:]
    return values


def _interrupt_when_training(km: KernelManager, marker) -> threading.Thread:
    def wait_then_interrupt():
        deadline = time.monotonic() + 240
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        km.interrupt_kernel()  # what the notebook's stop button sends: SIGINT to the kernel's process group

    thread = threading.Thread(target=wait_then_interrupt, daemon=True)
    thread.start()
    return thread


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone but for its exit status
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_notebook_trains_a_cell_defined_model_on_two_ranks_fit_after_fit(tmp_path):
    nb = _notebook()
    km = KernelManager(kernel_name="python3")
    client = NotebookClient(nb, km=km, timeout=280, resources={"metadata": {"path": str(tmp_path)}})
    stderr = open(tmp_path / "kernel.stderr", "w")
    # cleanup_kc: on leaving, a graceful shutdown as the notebook's "Shut Down Kernel" asks for
    with client.setup_kernel(stderr=stderr, stdout=stderr, cwd=str(tmp_path), cleanup_kc=True):
        kernel_pid = km.provisioner.process.pid
        for index in range(3):
            client.execute_cell(nb.cells[index], index)
        thread = _interrupt_when_training(km, tmp_path / "training")
        client.execute_cell(nb.cells[3], 3)
        thread.join()
        client.execute_cell(nb.cells[4], 4)
    stderr.close()

    (metrics,) = _printed(nb.cells[1], "METRICS")
    assert [metrics[s]["world_size"] for s in ("single", "ddp", "fsdp")] == [1, 2, 2]
    for strategy in ("ddp", "fsdp"):  # the same metrics as one device
        for key in ("val/loss", "val/acc", "test/loss", "train/loss"):
            assert abs(metrics[strategy][key] - metrics["single"][key]) <= 1e-5 * max(1, abs(metrics["single"][key])), (
                strategy,
                key,
            )
    again, kept = _printed(nb.cells[2], "AGAIN")
    assert (
        again["val/loss"] == metrics["ddp"]["val/loss"] and kept == {}
    )  # the second fit as the first; the process as before

    interrupted, kept = _printed(nb.cells[3], "INTERRUPTED")
    assert interrupted["status"] == "interrupted" and interrupted["signal"] == "SIGINT" and kept == {}
    assert (tmp_path / "out/interrupted/checkpoints/last").exists()
    resumed, kept = _printed(nb.cells[4], "RESUMED")
    assert resumed["status"] == "completed" and kept == {}
    assert resumed["steps"] > interrupted["steps"] > 3
    log = (tmp_path / "out/interrupted/train.log").read_text()
    assert f"step {interrupted['steps']}" in log.split("Resumed from", 1)[1].splitlines()[0]

    # the kernel shut down without tracebacks, and nothing it started is still running
    assert not _alive(kernel_pid)
    assert "Traceback" not in (tmp_path / "kernel.stderr").read_text()
    pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert len(pids) >= 2 * 5  # ddp, fsdp, ddp again, interrupted, resumed: 2 ranks each, forked
    assert not [pid for pid in pids if pid != kernel_pid and _alive(pid)]


def test_a_cell_error_reaches_the_cell_as_one_sentence(tmp_path):
    """A config mistake in a notebook: the cell's error says what to do, no rank starts."""
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                textwrap.dedent("""
        from framework import compose, fit
        fit(compose(["experiment=digits_mlp", "strategy=ddp_fork", "trainer.devices=2", "trainer.max_epochs=oops"]))
        """)
            )
        ]
    )
    client = NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError:
        pass
    error = next(o for o in nb.cells[0].outputs if o.output_type == "error")
    assert error.ename == "ConfigError" and "trainer.max_epochs" in error.evalue
    assert not (tmp_path / "outputs").exists() or not list((tmp_path / "outputs").rglob("results.json"))
