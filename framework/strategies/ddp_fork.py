"""DDP with ranks forked from the process that calls fit (Lightning's ddp_fork / ddp_notebook): a
notebook's or an interactive session's classes (``_target_: __main__.Net``) come along, since a
fork shares the parent's memory. Refused where CUDA is already initialised in that process (a
fork cannot use it); elsewhere the ranks fork from a server process (strategy=ddp), which is
safer and faster to start in a sweep."""

from __future__ import annotations

from framework.strategies.base import Strategy
from framework.strategies.ddp import DDPWrapping


class DDPForkStrategy(DDPWrapping, Strategy):
    name = "ddp_fork"
    launcher = "fork"


class DDPNotebookStrategy(DDPWrapping, Strategy):
    """``ddp_fork`` under the name notebooks know it by."""

    name = "ddp_notebook"
    launcher = "fork"
