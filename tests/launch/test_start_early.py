"""The ranks' fork server starts while the config is checked only for a job whose local ranks fork
from it: several processes under the elastic agent, as the one resolution of the strategy says
(its presets included: ddp_spawn spawns, ddp_notebook forks from this process, dp is one process)."""

from __future__ import annotations

from unittest import mock

import pytest

import framework.launch.servers as servers
from framework.cli.compose import compose
from framework.launch.start import start_ranks_early


@pytest.mark.parametrize(
    "overrides, starts",
    [
        (["strategy=ddp", "trainer.devices=2"], True),
        (["trainer.devices=2"], True),  # auto on 2 devices: ddp
        (["experiment=gpt_text", "strategy=tp", "trainer.devices=2"], True),
        (["strategy=ddp_spawn", "trainer.devices=2"], False),
        (["strategy=ddp_notebook", "trainer.devices=2"], False),
        (["strategy=dp", "trainer.devices=2"], False),
        (["trainer.devices=1"], False),
        (["strategy=ddp", "trainer.devices=2", "strategy.name=nope"], False),  # no such strategy: validation says
    ],
)
def test_the_fork_server_starts_early_only_for_ranks_it_will_fork(overrides, starts):
    with mock.patch.object(servers, "start_fork_server") as start:
        start_ranks_early(compose(overrides))
    assert start.called == starts


def test_the_fork_server_starts_under_a_tmpdir_too_deep_for_its_socket(tmp_path):
    import os
    import subprocess
    import sys

    deep = tmp_path / ("d" * 80)  # with multiprocessing's pymp-*/listener-*: beyond AF_UNIX's 107 bytes
    deep.mkdir()
    code = (
        "from multiprocessing import forkserver\n"
        "from framework.launch.servers import start_fork_server\n"
        "start_fork_server()\n"
        "print(forkserver._forkserver._forkserver_address)\n"
    )
    env = {**os.environ, "TMPDIR": str(deep)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # (it had failed: "OSError: AF_UNIX path too long")
    address = done.stdout.strip()
    assert address.startswith(("/tmp/pymp-", "/var/tmp/pymp-")) and not os.path.exists(os.path.dirname(address))
