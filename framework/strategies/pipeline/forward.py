"""A pipeline's forward outside training (validation, test, predict): the batch goes through the
stages one after another, and the last stage's output is shared with every stage, so each rank's
task computes the same loss and metrics from it as on one device (and the loop, the callbacks
and the stop vote see the same values everywhere). Any batch shape: nothing is fixed in advance,
as a training schedule's buffers are."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

# dtypes a stage may hand on, by code (sent as a tensor: no pickle between ranks)
_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]
_MAX_DIMS = 8


def _header(tensor: torch.Tensor | None, device) -> torch.Tensor:
    """dtype code, number of dimensions, shape: what the receiver allocates."""
    header = torch.zeros(_MAX_DIMS + 2, dtype=torch.int64, device=device)
    if tensor is not None:
        header[0], header[1] = _DTYPES.index(tensor.dtype), tensor.dim()
        header[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape)
    return header


def _allocate(header: torch.Tensor, device) -> torch.Tensor:
    shape = header[2 : 2 + int(header[1])].tolist()
    return torch.empty(shape, dtype=_DTYPES[int(header[0])], device=device)


def _send(tensor: torch.Tensor, dst: int, group) -> None:
    dist.send(_header(tensor, tensor.device), group_dst=dst, group=group)
    dist.send(tensor.contiguous(), group_dst=dst, group=group)


def _recv(src: int, group, device) -> torch.Tensor:
    header = _header(None, device)
    dist.recv(header, group_src=src, group=group)
    out = _allocate(header, device)
    dist.recv(out, group_src=src, group=group)
    return out


def _broadcast(tensor: torch.Tensor | None, src: int, group, device) -> torch.Tensor:
    header = _header(tensor, device)
    dist.broadcast(header, group_src=src, group=group)
    tensor = _allocate(header, device) if tensor is None else tensor.contiguous()
    dist.broadcast(tensor, group_src=src, group=group)
    return tensor


class PipelinedModel(nn.Module):
    """Rank ``rank`` of a pipeline of ``ranks`` ranks over ``group``: ``module`` is the model with the
    other ranks' modules removed, ``views`` the stages it runs (``module`` itself, or the stages
    rank, rank + ranks, ... interleaved); ``forward`` is the whole model's."""

    def __init__(self, module: nn.Module, views: list, rank: int, ranks: int, group, device: torch.device):
        super().__init__()
        self.module, self.rank, self.ranks, self.group, self.device = module, rank, ranks, group, device
        self.views = views  # (a plain list: their parameters are the module's, registered once)

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.ranks - 1

    @property
    def stage_count(self) -> int:
        return self.ranks * len(self.views)

    @property
    def stage_indices(self) -> list[int]:
        return [self.rank + v * self.ranks for v in range(len(self.views))]

    def forward(self, inputs: torch.Tensor, **kwargs) -> torch.Tensor:
        """``kwargs`` go to every stage (generation's cache: each rank keeps its own stages' keys and values)."""
        if torch.is_grad_enabled():
            raise RuntimeError(
                "a pipeline's forward outside its training schedule runs without gradients "
                "(validation, test, predict); training steps go through the strategy's schedule"
            )
        out = None
        for view, index in zip(self.views, self.stage_indices):  # the stages in order, around the ranks
            hidden = inputs if index == 0 else _recv((index - 1) % self.ranks, self.group, self.device)
            out = view(hidden, **kwargs)
            if index < self.stage_count - 1:
                _send(out, (index + 1) % self.ranks, self.group)
        return self.share_from_last(out if self.is_last else None)

    def share_from_last(self, tensor: torch.Tensor | None) -> torch.Tensor:
        """The last stage's ``tensor`` on every rank of this pipeline."""
        return _broadcast(tensor, self.ranks - 1, self.group, self.device)
