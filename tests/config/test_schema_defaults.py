"""The schemas (framework/config/schemas.py and each strategy's) are the one source of every
framework key's default; the YAML files of conf/ that show those keys must agree with them."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from framework.config.location import config_dir
from framework.config.schemas import AutoStrategyConfig, InitConfig, RootConfig, TrainerConfig
from framework.strategies.registry import STRATEGIES


def _defaults(schema) -> dict:
    out = {}
    for f in dataclasses.fields(schema):
        out[f.name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return out


def _yaml(path) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    node.pop("defaults", None)
    return node


def test_the_trainer_yaml_lists_every_trainer_key_with_the_schemas_default():
    assert _yaml(config_dir() / "trainer" / "default.yaml") == _defaults(TrainerConfig)


def test_the_root_keys_of_train_yaml_have_the_schemas_defaults():
    shown = _yaml(config_dir() / "train.yaml")
    defaults = _defaults(RootConfig)
    for key, value in shown.items():
        if key == "init":
            assert value == {k: v for k, v in _defaults(InitConfig).items() if k != "weights"}
        else:
            assert value == defaults[key], key


@pytest.mark.parametrize(
    "path",
    sorted(p.relative_to(config_dir() / "strategy").as_posix() for p in (config_dir() / "strategy").rglob("*.yaml")),
)
def test_each_strategy_yaml_shows_its_schemas_options_and_defaults(path):
    node = _yaml(config_dir() / "strategy" / path)
    name = node.get("name") or path.split("/")[0].removesuffix(".yaml")
    if name == "auto":
        assert node == {**_defaults(AutoStrategyConfig), "name": "auto"}
        return
    cls = STRATEGIES[name]
    schema = cls.schema
    assert set(node) <= {f.name for f in dataclasses.fields(schema)}, path
    if "/" not in path:  # a group's own option: every option with its schema's default (--cfg job shows them)
        preset = cls.presets[name].sets if name in cls.presets else {}  # a preset: its settings over them
        assert node == {**_defaults(schema), **preset, "name": name}, path
