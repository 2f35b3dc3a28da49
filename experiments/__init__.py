"""Experiment configs, installed as framework.conf.experiment (the experiment group)."""
