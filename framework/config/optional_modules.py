"""The optional libraries a run may need, and the extra of this package that brings each: what the
package's own metadata says (pyproject.toml's ``[project.optional-dependencies]``, as installed), so a
message never names an extra that does not bring the library.

Each check that knows a run needs a library says so naming its key (``not_installed``); every check
before start also runs under a net (config/validate.py's ``_answers``): a library a check imports and does
not find becomes one line naming it and its extra (exit 2), never a traceback. No torch on import."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from functools import lru_cache
from typing import Optional

PACKAGE = "framework"
# extras that bring everything (the suite's) or nothing a run imports: never the one to name
_CATCH_ALL = ("test", "docs")


def _normalized(name: str) -> str:
    """A distribution's or module's name as PEP 503 compares them (``lm-eval`` is ``lm_eval``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


@lru_cache(maxsize=1)
def extras() -> dict[str, tuple[str, list[str]]]:
    """Normalized distribution name -> (its name as listed, the extras that bring it, in pyproject's
    order); empty where the package's metadata is not installed."""
    try:
        requirements = importlib.metadata.requires(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    found: dict[str, tuple[str, list[str]]] = {}
    for line in requirements:
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", line)
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if extra and name:
            found.setdefault(_normalized(name.group()), (name.group(), []))[1].append(extra.group(1))
    return found


def distribution(module: str) -> Optional[str]:
    """The optional dependency (its distribution's name) that brings ``module`` (``transformers.x``,
    ``hydra_plugins.hydra_optuna_sweeper``); None: not one of this package's extras."""
    parts = module.split(".")
    top = parts[1] if parts[0] == "hydra_plugins" and len(parts) > 1 else parts[0]  # (a namespace of plugins)
    entry = extras().get(_normalized(top))
    return entry[0] if entry else None


def install_hint(*modules: str) -> str:
    """What to run to install ``modules``: ``pip install 'framework[hf]' (or pip install transformers)``
    (the first extra that brings them all; without one, pip's own command)."""
    names = [distribution(m) or m.split(".")[0] for m in modules]
    brought = [extras().get(_normalized(name), ("", []))[1] for name in names]
    common = [e for e in brought[0] if e not in _CATCH_ALL and all(e in others for others in brought)]
    command = f"pip install {' '.join(names)}"
    return f"pip install '{PACKAGE}[{common[0]}]' (or {command})" if common else command


def is_missing(module: str) -> bool:
    """Whether ``module`` does not import here (its top-level package is not installed)."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is None
    except (ImportError, ValueError):
        return True


def not_installed(key: str, module: str, purpose: str = "") -> str:
    """The line that says ``key`` needs ``module``, which is missing, and how to install it."""
    name = distribution(module) or module.split(".")[0]
    return f"{key}: needs {name}{f' ({purpose})' if purpose else ''}, which is not installed; {install_hint(module)}"


def missing_problem(err: ModuleNotFoundError, key: str = "") -> Optional[str]:
    """``err`` (an import of an optional dependency that failed) as a problem naming the library and its
    extra; None where the missing module is no optional dependency of this package (a bug, not a choice)."""
    name = getattr(err, "name", None) or ""
    if not name or distribution(name) is None:
        return None
    return not_installed(key or "this run", name)
