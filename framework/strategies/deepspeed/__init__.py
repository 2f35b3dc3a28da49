"""DeepSpeed (strategy=deepspeed): the ZeRO strategy, its config, memory estimate, checkpoint state
and the library's loading."""
