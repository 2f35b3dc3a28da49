"""Ranks forked from a process whose autograd has started threads (a compiled model's backward
ran there, as in a notebook's earlier cell) cannot run backward: such a fit is refused before any
rank starts, naming the strategy and what to do, instead of failing in the ranks or hanging."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys, torch
    from framework import compose, fit
    from framework.config.errors import ConfigError
    from framework.launch.main_module import autograd_survives_fork

    print("CLEAN", autograd_survives_fork())
    model = torch.nn.Linear(4, 1)
    torch.compile(model, backend="eager")(torch.randn(2, 4)).sum().backward()  # starts autograd's threads
    print("AFTER COMPILE", autograd_survives_fork())
    try:
        fit(compose(["experiment=digits_mlp", "strategy=ddp_fork", "trainer.devices=2", "trainer.max_epochs=1",
                     f"hydra.run.dir={sys.argv[1]}"]))
    except ConfigError as err:
        print("REFUSED", err)
""")


def test_a_fork_after_a_compiled_backward_is_refused_before_start(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "run")], capture_output=True, text=True, timeout=240
    )
    assert "CLEAN True" in out.stdout and "AFTER COMPILE False" in out.stdout, out.stdout + out.stderr
    refusal = out.stdout.split("REFUSED", 1)[1]
    assert "strategy=ddp_fork: its ranks are forks of this process, whose autograd has started threads" in refusal
    assert "restart the kernel" in refusal
    assert not (tmp_path / "run" / "results.json").exists()  # nothing started, nothing written
