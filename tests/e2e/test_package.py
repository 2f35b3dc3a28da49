"""The framework as a user installs it: a wheel in a fresh venv, console scripts, an empty
working directory far from the source tree."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import tomllib
from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[2]
SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
]


def test_every_package_of_the_source_tree_is_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = find_packages(str(ROOT), include=["framework*"]) + find_namespace_packages(
        str(ROOT), include=["hydra_plugins.*"]
    )
    assert set(found) | {"framework.conf", "framework.conf.experiment"} == listed


def _run(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_the_wheel_installed_in_a_fresh_venv_trains_from_an_empty_directory(tmp_path):
    wheels = tmp_path / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        tmp_path,
        dict(os.environ),
    )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # torch & co. from the environment that runs the tests (a venv, or the base interpreter): its
    # site-packages as a path of the new venv (system_site_packages would reach the base interpreter,
    # which a venv of the tests does not install into); its own .pth files stay out (the editable copy)
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path, dict(os.environ)
    ).stdout.strip()
    Path(purelib, "test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    [wheel] = wheels.glob("framework-*.whl")
    # --ignore-installed: the test environment's own (editable) copy is visible to the venv
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        tmp_path,
        dict(os.environ),
    )
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing from the source tree
    where = _run([str(python), "-c", "import framework; print(framework.__file__)"], work, env).stdout
    assert str(env_dir) in where, where  # the installed copy, not the source tree
    bin_dir = env_dir / "bin"

    _run([str(bin_dir / "framework-train"), *SHORT, "hydra.run.dir=run"], work, env)
    results = json.loads((work / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["experiment"] == "digits_cnn"
    _run([str(bin_dir / "framework-evaluate"), "ckpt_path=run/checkpoints/last", "hydra.run.dir=eval"], work, env)
    assert (
        json.loads((work / "eval" / "results.json").read_text())["metrics"]["test/acc"]
        == results["metrics"]["test/acc"]
    )
    plan = _run([str(bin_dir / "framework-plan"), "experiment=digits_mlp"], work, env).stdout
    assert plan.startswith("digits_mlp: ")
    api = (
        "from framework import compose, fit\n"
        f"print(fit(compose(['experiment=digits_mlp', *{SHORT!r}]), output_dir='api')['status'])\n"
    )
    assert _run([str(python), "-c", api], work, env).stdout.strip().endswith("completed")
    # shell completion (`eval "$(framework-train -sc install=bash)"` asks the script like this)
    completion = _run(
        [str(bin_dir / "framework-train"), "-sc", "query=bash"],
        work,
        {**env, "COMP_LINE": "framework-train strategy=d", "COMP_POINT": "26"},
    ).stdout.split()
    assert {"strategy=ddp", "strategy=dp", "strategy=ddp_spawn"} <= set(completion)
    # python -m, a sweep, its report; then the report again through its console script
    _run(
        [
            str(python),
            "-m",
            "framework.train",
            "-m",
            "experiment=digits_mlp",
            *SHORT,
            "seed=1,2",
            "hydra.sweep.dir=sweep",
        ],
        work,
        env,
    )
    (work / "sweep" / "report.md").unlink()
    _run([str(bin_dir / "framework-report"), "sweep"], work, env)
    assert "2 completed" in (work / "sweep" / "report.md").read_text()
