"""The Python API from a plain script, as users write one: no `if __name__ == "__main__":`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

OVERRIDES = [
    "experiment=digits_mlp",
    "strategy=ddp",
    "trainer.devices=2",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
    "trainer.enable_progress_bar=false",
]


def _script(tmp_path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_multi_rank_fit_from_a_script_without_a_main_guard(tmp_path):
    proc = _script(
        tmp_path,
        f"""
        from framework import compose, fit
        from framework.config import ConfigError
        cfg = compose({OVERRIDES!r})
        print("status", fit(cfg, output_dir="out")["status"])
        try:  # the same cell again: refused in the API's words, then run again on purpose
            fit(cfg, output_dir="out")
        except ConfigError as err:
            print("refused", err)
        print("status", fit(cfg, output_dir="out", overwrite=True)["status"])
        """,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("status completed") == 2  # the script ran once: the ranks did not re-run it
    assert "fit(cfg, output_dir=...)" in proc.stdout and "pass overwrite=True" in proc.stdout
    assert "hydra.run.dir" not in proc.stdout
    assert json.loads((tmp_path / "out" / "results.json").read_text())["world_size"] == 2
    # overwrite=True replaced the first run: one run's TensorBoard events, not two mixed
    assert len(list((tmp_path / "out" / "tb").rglob("events.out.tfevents.*"))) == 1


def test_a_class_defined_in_the_script_needs_the_guard_and_says_so(tmp_path):
    proc = _script(
        tmp_path,
        f"""
        import torch
        from framework import compose, fit

        class Net(torch.nn.Module):
            def __init__(self, num_classes: int = 10):
                super().__init__()
                self.fc = torch.nn.Linear(64, num_classes)

            def forward(self, x):
                return self.fc(x.flatten(1))

        cfg = compose({OVERRIDES!r} + ["model._target_=__main__.Net", "~model.input_shape", "~model.hidden_sizes",
                                       "~model.dropout"])
        fit(cfg, output_dir="out")
        """,
    )
    assert proc.returncode != 0
    assert 'Put the call under `if __name__ == "__main__":`' in proc.stderr  # from the rank
    # and in the error the script gets, and in results.json
    hint = 'a script that calls fit() needs `if __name__ == "__main__":`'
    assert hint in proc.stderr.strip().splitlines()[-1]
    assert hint in json.loads((tmp_path / "out" / "results.json").read_text())["error"]


def test_after_a_multi_rank_fit_the_scripts_signal_handlers_are_its_own(tmp_path):
    """torch's agent installs handlers in the launching process; after fit they are the script's
    again, and a later Ctrl-C is a KeyboardInterrupt (not the agent's SignalException)."""
    proc = _script(
        tmp_path,
        f"""
        import os, signal, threading
        from framework import compose, fit

        def mine(signum, frame):
            print("mine", signum)

        signal.signal(signal.SIGTERM, mine)
        # Ctrl-C raises, as in a script started from a terminal (a child of a shell's background
        # job starts with SIGINT ignored, and Python keeps that)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)]
        threads, environ = threading.active_count(), dict(os.environ)
        fit(compose({OVERRIDES!r}), output_dir="out")
        after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)]
        print("same handlers", after == before, "threads", threading.active_count() - threads,
              "environment", dict(os.environ) == environ)
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.pause()
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        """,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "same handlers True threads 0 environment True" in proc.stdout
    assert "mine 15" in proc.stdout and "KeyboardInterrupt" in proc.stdout
    assert "SignalException" not in proc.stderr


def test_rank_zeros_log_lines_reach_the_console_as_verbose_says_on_one_device_as_on_two(tmp_path):
    """verbose (default outside a notebook: on) shows rank 0's log lines, in train.log's format, on
    one device as on two; off, the console has the progress alone, a bar included (tqdm's redirect
    of log lines above the bar had printed them where nothing printed any)."""
    tiny = [o for o in OVERRIDES if o.split("=")[0] not in ("strategy", "trainer.devices")]
    bar = ["trainer.enable_progress_bar=true", "callbacks.progress_bar.plain=false"]
    (tmp_path / "script.py").write_text(
        textwrap.dedent(
            f"""
            from framework import compose, fit
            for name, layout in (("single", ["strategy=single"]), ("ddp", ["strategy=ddp", "trainer.devices=2"])):
                print("--", name, "verbose", flush=True)
                fit(compose({tiny!r} + layout), output_dir="out/" + name)
                print("--", name, "quiet", flush=True)
                fit(compose({tiny!r} + layout + {bar!r}), output_dir="out/" + name + "_quiet", verbose=False)
            print("-- end", flush=True)
            """
        )
    )
    together = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}  # (in the order they were written)
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, text=True, timeout=300, **together)
    assert proc.returncode == 0, proc.stdout[-3000:]
    shown = {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in proc.stdout.split("-- ") if part.strip()}
    for name in ("single", "ddp"):
        assert "][INFO] - Saved checkpoint" in shown[f"{name} verbose"], shown[f"{name} verbose"]
        assert "Saved checkpoint" not in shown[f"{name} quiet"] and "Model summary" not in shown[f"{name} quiet"]
