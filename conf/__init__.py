"""The config groups, installed as the package framework.conf (Hydra reads pkg://framework.conf)."""
