"""Hydra's basic sweeper (every combination of the sweep's values), with the command line winning,
and a sweep that continues in its own directory.

The framework hands Hydra a plain dotted override as ``++key=value`` (so that a typo reaches its
validator, ``framework/config/overrides.py``). Hydra's basic sweeper keys the sweep by the override
as written, so ``trainer.devices=4`` on the command line (``++trainer.devices=4``) and an
experiment's ``hydra.sweeper.params: {trainer.devices: 1,2,4}`` became two axes: three identical
jobs, each on 4 devices. Here an entry of ``hydra.sweeper.params`` gives way to the command line's
override of the same key, whatever its prefix, as Hydra means it to.

The launcher is wrapped in ``StudyLauncher``: in a sweep directory that holds jobs already, each job
of the grid goes to the directory of its overrides, and only those not kept run (study.py).
"""

from __future__ import annotations

from typing import Any, List

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


def override_key(override: str) -> str:
    """The key of ``key=value`` without Hydra's ``+``, ``++`` or ``~`` prefix."""
    return override.split("=", 1)[0].lstrip("+~")


class FrameworkSweeper(BasicSweeper):
    def setup(self, *, hydra_context, task_function, config) -> None:
        # (imported here: the console registers this plugin at every start, --help too)
        from hydra_plugins.framework_sweeper.study_launcher import StudyLauncher

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.launcher = StudyLauncher(self.launcher, hydra_context, config)

    def sweep(self, arguments: List[str]) -> Any:
        self._given = {override_key(a) for a in arguments}
        return super().sweep(arguments)

    def _parse_config(self) -> List[str]:
        return [p for p in super()._parse_config() if override_key(p) not in self._given]
