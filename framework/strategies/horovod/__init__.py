"""Horovod (strategy=horovod): its data parallelism on torch.distributed (``strategy.py``), the real
horovod.torch (``library_strategy.py``, strategy.backend=horovod), and Adasum."""
