"""Two of Hydra's costs that a framework command does not need to pay, removed without changing
what Hydra composes or prints:

- A plain run's config is composed twice: ``_run_hydra`` composes it once (as a sweep) only to
  read ``hydra.mode``, then ``Hydra.run`` composes it again (about 0.2 s each). Here the mode is
  read from the run composition, which ``Hydra.run`` then receives.
- ``--help`` and shell completion list each config group's options through a fresh copy of the
  config repository per group (a deep copy of the structured-config store: 7 ms each, about 1 s
  for ``--help``). Here the listings share one copy per (config name, overrides): the listing
  only reads it, and the config files do not change during a command.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple


def install() -> None:
    """Install both on Hydra's classes (idempotent; a Hydra without these methods keeps its own
    behaviour)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra

    get_mode = getattr(Hydra, "get_mode", None)
    if get_mode is not None and not getattr(get_mode, "fast_path", False):
        Hydra.get_mode = _mode_from_run_composition(get_mode)
    if hasattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo") and not getattr(
        ConfigLoaderImpl.get_group_options, "fast_path", False
    ):
        ConfigLoaderImpl.get_group_options = _group_options_from_one_copy()


def _mode_from_run_composition(original: Callable[..., Any]) -> Callable[..., Any]:
    from hydra.types import RunMode

    def get_mode(self: Any, config_name: Optional[str], overrides: List[str]) -> Any:
        loader = self.config_loader
        try:  # a sweep override or a missing default fails here: Hydra's own way then decides
            cfg = loader.load_configuration(config_name=config_name, overrides=overrides, run_mode=RunMode.RUN)
        except Exception:  # noqa: BLE001 - as Hydra's get_mode, which falls back to None on any error
            return original(self, config_name, overrides)
        if cfg.hydra.mode in (None, RunMode.RUN):
            _serve_once(loader, cfg, config_name, overrides)
        return cfg.hydra.mode

    get_mode.fast_path = True  # type: ignore[attr-defined]
    return get_mode


def _serve_once(loader: Any, cfg: Any, config_name: Optional[str], overrides: List[str]) -> None:
    """The loader's next composition returns ``cfg`` if it is the run composition of the same
    name and overrides (once; any other is the loader's own)."""
    from hydra.types import RunMode

    compose = loader.load_configuration
    wanted = (config_name, list(overrides))

    def load_configuration(config_name: Optional[str], overrides: List[str], run_mode: Any, **kwargs: Any) -> Any:
        del loader.load_configuration  # one use: the class's method shows through again
        if (config_name, list(overrides)) == wanted and run_mode == RunMode.RUN:
            return cfg
        return compose(config_name=config_name, overrides=overrides, run_mode=run_mode, **kwargs)

    loader.load_configuration = load_configuration


def _group_options_from_one_copy() -> Callable[..., Any]:
    from hydra.core.object_type import ObjectType

    def get_group_options(
        self: Any,
        group_name: str,
        results_filter: Optional[Any] = ObjectType.CONFIG,
        config_name: Optional[str] = None,
        overrides: Optional[List[str]] = None,
    ) -> List[str]:
        repos: Dict[Tuple[Optional[str], Tuple[str, ...]], Any] = self.__dict__.setdefault("_listing_repos", {})
        key = (config_name, tuple(overrides or ()))
        if key not in repos:
            repos[key] = self._parse_overrides_and_create_caching_repo(config_name, list(key[1]))[1]
        return repos[key].get_group_options(group_name, results_filter)

    get_group_options.fast_path = True  # type: ignore[attr-defined]
    return get_group_options
