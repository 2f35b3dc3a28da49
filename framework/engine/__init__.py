"""The training engine: the Trainer and its parts (training step, evaluation passes, stopping,
callback list, loaders), model preparation, precision, seeding, scheduler stepping, checkpoints,
results.json, stop signals, the plug-in contracts. May import: strategies and every layer below."""
