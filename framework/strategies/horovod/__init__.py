"""Horovod (strategy=horovod): its data parallelism on torch.distributed, the real horovod.torch
(strategy.backend=horovod), and Adasum."""
