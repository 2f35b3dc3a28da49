"""Shared by the tests (not test modules): ``configs`` (shrunk configs, readers of a run's outputs) and
``probes`` (plug-ins that record what the engine did)."""
