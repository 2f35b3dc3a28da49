"""The keys of ours that live under a config group (``datamodule.tokenizer``, ``trainer.max_epochs``,
``optimizer.lr``, ...): a top-level key of the same name is a slip (``+tokenizer=x``), not a key of
the user's own, and is refused naming where it belongs."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import yaml

from framework.config.location import config_dir
from framework.config.schemas import InitConfig, SchedulerConfig, StrategyConfig, TrainerConfig

# The groups whose options are one node of keys (callbacks and logger hold named nodes).
KEYED_GROUPS = ("model", "datamodule", "task", "optimizer", "scheduler", "strategy", "trainer")
_SCHEMAS = {"trainer": TrainerConfig, "init": InitConfig, "scheduler": SchedulerConfig, "strategy": StrategyConfig}


def group_keys(extra_dirs: Iterable[str] = (), composed: Iterable[str] = ()) -> dict[str, list[str]]:
    """Each key of ours under a group -> the full keys it is (``tokenizer`` -> ``[datamodule.tokenizer]``):
    from the schemas, every option of the framework's groups and of ``extra_dirs`` (the user's config
    directories), and ``composed``, the full keys of the groups as composed (``model.d_model``)."""
    found: dict[str, set[str]] = defaultdict(set)
    for group, schema in _SCHEMAS.items():
        for field in dataclasses.fields(schema):
            found[field.name].add(f"{group}.{field.name}")
    for directory in (config_dir(), *map(Path, extra_dirs)):
        for group in KEYED_GROUPS:
            for path in sorted((directory / group).rglob("*.yaml")) if (directory / group).is_dir() else []:
                for key in _option_keys(path):
                    found[key].add(f"{group}.{key}")
    for full_key in composed:
        found[full_key.split(".", 1)[1]].add(full_key)
    return {key: sorted(paths) for key, paths in found.items()}


def _option_keys(path: Path) -> list[str]:
    try:
        node = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return []  # Hydra names a broken option file when it is selected
    if not isinstance(node, dict):
        return []
    return [str(k) for k in node if not str(k).startswith("_") and k != "defaults"]


def misplaced_key_message(key: str, paths: list[str]) -> str:
    """The problem of a top-level ``key`` that is ours under a group (``paths``)."""
    return f"{key}: not a top-level key; did you mean {' or '.join(paths[:3])}?"
