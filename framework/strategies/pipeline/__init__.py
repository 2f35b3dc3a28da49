"""Pipeline parallelism (strategy=pp, pp/fsdp, pp/ddp): the strategy, its split into stages, its
schedules, checks and state."""
