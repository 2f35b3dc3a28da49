"""framework.config.hydra_fast_paths: a plain run is composed once, group listings share one
repository copy, and what Hydra composes, decides and lists is unchanged."""

from __future__ import annotations

import pytest
from hydra import initialize_config_module
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import OmegaConf

from framework.cli import hydra_fast_paths
from framework.config.location import CONFIG_PACKAGE

RUN = ["experiment=digits_mlp", "model.hidden_sizes=[16]"]


@pytest.fixture
def hydra(monkeypatch):
    """Hydra as the command line sets it up, with and without the fast paths; the loader counts
    its compositions."""
    for cls, name in (
        (Hydra, "get_mode"),
        (ConfigLoaderImpl, "get_group_options"),
        (ConfigLoaderImpl, "load_configuration"),
    ):
        monkeypatch.setattr(cls, name, getattr(cls, name))  # restored after the test
    compositions = []
    compose = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        compositions.append(kwargs.get("run_mode"))
        return compose(self, *args, **kwargs)

    ConfigLoaderImpl.load_configuration = counted
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        yield GlobalHydra.instance().hydra, compositions
    GlobalHydra.instance().clear()


def _run_config(hydra: Hydra, overrides: list[str]):
    """What ``_run_hydra`` and ``Hydra.run`` compose for a plain run."""
    mode = hydra.get_mode(config_name="train", overrides=overrides)
    cfg = hydra.compose_config(config_name="train", overrides=overrides, run_mode=RunMode.RUN)
    return mode, cfg


def _same(a, b) -> bool:
    keep = lambda c: OmegaConf.to_container(c, resolve=False)  # noqa: E731
    return keep(a) == keep(b)


def test_a_plain_run_is_composed_once_into_the_same_config(hydra):
    hydra, compositions = hydra
    mode, own = _run_config(hydra, RUN)
    assert mode is None and compositions == [RunMode.MULTIRUN, RunMode.RUN]  # Hydra's way: twice
    compositions.clear()
    hydra_fast_paths.install()
    mode, fast = _run_config(hydra, RUN)
    assert mode is None and compositions == [RunMode.RUN]
    assert _same(fast, own)
    # served once only: the next composition is a real one again
    compositions.clear()
    hydra.compose_config(config_name="train", overrides=RUN, run_mode=RunMode.RUN)
    assert compositions == [RunMode.RUN]


def test_a_config_that_asks_for_a_sweep_and_a_sweep_override_decide_as_hydra_does(hydra):
    hydra, compositions = hydra
    hydra_fast_paths.install()
    # hydra.mode=MULTIRUN (from the command line or a config): the sweep composes its own config
    sweep = ["hydra.mode=MULTIRUN", "optimizer.lr=0.1"]
    assert hydra.get_mode(config_name="train", overrides=sweep) == RunMode.MULTIRUN
    compositions.clear()
    hydra.compose_config(config_name="train", overrides=sweep, run_mode=RunMode.MULTIRUN)
    assert compositions == [RunMode.MULTIRUN]
    # a sweep override without -m: Hydra's own decision (None), then its own error
    assert hydra.get_mode(config_name="train", overrides=["optimizer.lr=0.1,0.2"]) is None
    with pytest.raises(ConfigCompositionException, match="Ambiguous value for argument"):
        hydra.compose_config(config_name="train", overrides=["optimizer.lr=0.1,0.2"], run_mode=RunMode.RUN)


def test_group_listings_are_hydras_own(hydra):
    hydra, _ = hydra
    loader = hydra.config_loader

    def listing():
        groups = hydra.list_all_config_groups()
        return {g: (loader.get_group_options(g), loader.get_group_options(g, ObjectType.GROUP)) for g in groups}

    own = listing()
    hydra_fast_paths.install()
    assert listing() == own and {"model", "strategy/bagua", "hydra/launcher"} <= set(own)
    assert "mlp" in own["model"][0]
