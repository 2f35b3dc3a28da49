"""``python -m framework.plan [overrides]``: per-rank model-state memory of each strategy and
device count, predicted from the parameter count, dtype and optimizer before anything trains.

Model state = parameters + gradients + optimizer state (the ZeRO paper's accounting, fp32
training: 4 + 4 + K bytes per parameter, K = 8 for Adam/AdamW, 4 for SGD with momentum,
0 for plain SGD). Per rank with N data-parallel ranks:
single/dp/ddp/ddp2: (8 + K)·P;  zero (stage 1): 8·P + K·P/N;  fsdp: (8 + K)·P/N;
hsdp: (8 + K)·P/shard. Activations and communication buffers are not model state.
"""
from __future__ import annotations

import sys

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

STATE_BYTES = {"Adam": 8, "AdamW": 8, "SGD": 4}


def optimizer_state_bytes(cfg: DictConfig) -> int:
    """Bytes of optimizer state per parameter (fp32) for the configured optimizer."""
    name = str(cfg.optimizer._target_).rsplit(".", 1)[-1]
    if name == "SGD" and not cfg.optimizer.get("momentum"):
        return 0
    return STATE_BYTES.get(name, 8)


def count_parameters(cfg: DictConfig) -> int:
    """Parameters of the configured model, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = instantiate(cfg.model, _convert_="all")
    return sum(p.numel() for p in model.parameters())


def predict_model_state_bytes(params: int, strategy: str, world: int, k: int, shard: int | None = None) -> float:
    """Per-rank model-state bytes (fp32) for ``strategy`` on ``world`` data-parallel ranks."""
    full = (8 + k) * params
    if strategy == "zero":
        return 8 * params + k * params / world
    if strategy == "fsdp":
        return full / world
    if strategy == "hsdp":
        return full / (shard or world)
    return full


def plan(cfg: DictConfig, devices=(1, 2, 4, 8)) -> list[dict]:
    params, k = count_parameters(cfg), optimizer_state_bytes(cfg)
    return [{"strategy": s, "devices": n, "parameters": params,
             "model_state_bytes_per_rank": predict_model_state_bytes(params, s, n, k)}
            for s in ("ddp", "zero", "fsdp") for n in devices]


def main() -> None:
    from framework import compose

    cfg = compose(sys.argv[1:])
    rows = plan(cfg)
    params, k = rows[0]["parameters"], optimizer_state_bytes(cfg)
    print(f"{cfg.name}: {params:,} parameters, fp32, {cfg.optimizer._target_} ({k} B/param of state)")
    print(f"{'strategy':<8} " + " ".join(f"{n:>12} dev" for n in (1, 2, 4, 8)))
    for strategy in ("ddp", "zero", "fsdp"):
        cells = [r["model_state_bytes_per_rank"] for r in rows if r["strategy"] == strategy]
        print(f"{strategy:<8} " + " ".join(f"{c / 2**20:>12.2f} MiB" for c in cells))


if __name__ == "__main__":
    main()
