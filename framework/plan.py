"""``framework-plan [overrides]`` (``python -m framework.plan``): per-rank model-state memory of each strategy and
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
from omegaconf import DictConfig, OmegaConf

from framework.engine.memory import optimizer_state_bytes
from framework.strategies import STRATEGIES

COMPARED = ("ddp", "zero", "fsdp")


def count_parameters(cfg: DictConfig) -> int:
    """Parameters of the configured model, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = instantiate(cfg.model, _convert_="all")
    return sum(p.numel() for p in model.parameters())


def plan(cfg: DictConfig, devices=(1, 2, 4, 8)) -> list[dict]:
    """Per-rank model-state bytes of each compared strategy on each device count (one node)."""
    params = count_parameters(cfg)
    k = optimizer_state_bytes(OmegaConf.to_container(cfg.optimizer, resolve=True))
    rows = []
    for name in COMPARED:
        cls = STRATEGIES[name]
        for n in devices:
            topology = cls.make_topology(n, 1, cls.schema(name=name))
            rows.append({"strategy": name, "devices": n, "parameters": params,
                         "model_state_bytes_per_rank": cls.predict_model_state_bytes(params, k, topology)})
    return rows


def main() -> None:
    from framework import compose

    if {"-h", "--help"} & set(sys.argv[1:]):
        print(f"usage: framework-plan [group=option ...] [key=value ...]\n{__doc__}")
        return
    cfg = compose(sys.argv[1:])
    rows = plan(cfg)
    params = rows[0]["parameters"]
    k = optimizer_state_bytes(OmegaConf.to_container(cfg.optimizer, resolve=True))
    print(f"{cfg.name}: {params:,} parameters, fp32, {cfg.optimizer._target_} ({k} B/param of state)")
    print(f"{'strategy':<8} " + " ".join(f"{n:>12} dev" for n in (1, 2, 4, 8)))
    for strategy in COMPARED:
        cells = [r["model_state_bytes_per_rank"] for r in rows if r["strategy"] == strategy]
        print(f"{strategy:<8} " + " ".join(f"{c / 2**20:>12.2f} MiB" for c in cells))


if __name__ == "__main__":
    main()
