"""Servers and stores of a local multi-rank run listen on the loopback interface only."""

from __future__ import annotations

import ipaddress
import json

from framework import compose, fit
from tests.helpers.configs import TINY


def test_no_socket_of_a_local_ddp_run_listens_beyond_loopback(tmp_path):
    out = tmp_path / "listening.json"
    results = fit(
        compose(
            [
                *TINY,
                "strategy=ddp",
                "trainer.devices=2",
                "trainer.max_epochs=1",
                "+callbacks.sockets._target_=tests.helpers.probes.ListeningSockets",
                f"+callbacks.sockets.out={out}",
            ]
        ),
        output_dir=str(tmp_path / "run"),
    )
    assert results["status"] == "completed"
    listening = json.loads(out.read_text())
    assert len(listening) >= 2, listening  # the agent's two stores at least
    hosts = {address.rsplit(":", 1)[0] for address in listening}
    assert all(
        ipaddress.ip_address(h).is_loopback or ipaddress.ip_address(h) == ipaddress.ip_address("::ffff:127.0.0.1")
        for h in hosts
    ), listening
