"""The run's strategy, resolved once (framework/strategies/registry.py's ``resolve``): the class that
runs it, its typed options, the topology of processes and parallel degrees, and how local ranks
start. What the checks, the plan, ``strategy=auto``, the launcher, the ranks and the report read, as
every consumer of torchtitan's ``ParallelDims`` reads that one object."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from framework.config.topology import Topology


@dataclass(frozen=True)
class Layout:
    """``strategy``: the Strategy class (a preset's class, a family's member an option selects);
    ``options``: its schema's dataclass, a preset's settings in; ``target``: ``strategy._target_``
    where the run names a class of the user's (config.yaml keeps it, the ranks import it again)."""

    strategy: type
    options: Any
    topology: Topology
    target: Optional[str] = None

    @property
    def name(self) -> str:
        """The name the run selected (a preset's: fsdp, not parallel)."""
        return getattr(self.options, "name", None) or self.strategy.name

    @property
    def start(self) -> str:
        """How local ranks start: elastic (torch's agent, forked from a server), fork or spawn."""
        return self.strategy.start_method(self.options)

    def node(self) -> dict:
        """The strategy node of config.yaml: every option (its schema's defaults in), the target kept."""
        options = asdict(self.options)
        return {"_target_": self.target, **options} if self.target else options
