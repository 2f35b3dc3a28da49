"""Weights drawn or read whole and kept by each rank in its part: what every model's ``init_weights``
shares (the built-in GPT's, a Hugging Face model's, the adapters')."""

from __future__ import annotations

import torch


def copy_into(param: torch.Tensor, full: torch.Tensor) -> None:
    """``full`` into ``param``: whole, or this rank's shard of it when ``param`` is a DTensor."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor):
        # src_data_rank=None: every rank drew the same full tensor; each keeps its part, no communication
        local = distribute_tensor(
            full.to(param.device_mesh.device_type), param.device_mesh, param.placements, src_data_rank=None
        )
        param.to_local().copy_(local.to_local())
    else:
        param.copy_(full.to(param.device, param.dtype))
