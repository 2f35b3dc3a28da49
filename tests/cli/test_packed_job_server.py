"""hydra/launcher=packed's job server: which task functions its jobs can start from (by name),
a launcher that stays without torch, and a server that ends without the interpreter's teardown
while a process forked from it keeps its own exit status."""

from __future__ import annotations

import subprocess
import sys

from framework.cli import train
from framework.launch.packed_job import task_name
from framework.launch.servers import asks_for_packed


def _module_level_task(cfg):
    return None


def test_a_task_function_starts_from_the_server_only_when_its_name_imports_back_to_it():
    assert task_name(train._hydra_main.__wrapped__) == ("framework.cli.train", "_hydra_main")
    assert task_name(_module_level_task) == (__name__, "_module_level_task")

    def closure(cfg):
        return None

    assert task_name(closure) is None  # forked from the launcher instead
    assert task_name(lambda cfg: None) is None
    closure.__module__, closure.__qualname__ = "__main__", "closure"  # a script's own
    assert task_name(closure) is None


def test_the_command_line_starts_the_server_for_a_packed_multirun_only():
    assert asks_for_packed(["-m", "hydra/launcher=packed", "seed=1,2"])
    assert asks_for_packed(["--multirun", "hydra/launcher=packed"])
    assert not asks_for_packed(["hydra/launcher=packed"])  # one run: Hydra's basic run, no launcher
    assert not asks_for_packed(["-m", "seed=1,2"])


def test_the_launcher_and_its_report_import_no_torch():
    code = (
        "import sys, hydra_plugins.framework_packed.packed_launcher, framework.report, framework.cli.train\n"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_server_leaves_without_teardown_and_its_forks_keep_their_status():
    code = (
        "import os, sys, framework.launch.quick_server_exit\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(3)\n"  # a process forked from the server: its atexit hook leaves it alone
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), flush=True)\n"
        "sys.exit(5)\n"  # the server itself: os._exit(0) at exit, before the modules are freed
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.stdout.strip(), done.returncode) == ("3", 0)
