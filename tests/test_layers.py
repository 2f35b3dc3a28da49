"""The layering of ``framework/`` is a checked property: a module imports only from its own layer
or the layers below it (docs/architecture.md draws them). The order is written once, here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

# Top-down. A package (or root module) named here holds every module under it.
LAYERS = [
    (
        "entry points",
        [
            "framework",
            "framework.api",
            "framework.train",
            "framework.evaluate",
            "framework.predict",
            "framework.generate",
            "framework.plan",
        ],
    ),
    ("cli", ["framework.cli"]),
    ("job", ["framework.job"]),
    ("launch", ["framework.launch"]),
    ("rank", ["framework.rank"]),
    ("plug-ins", ["framework.callbacks", "framework.loggers", "framework.report"]),
    ("engine", ["framework.engine"]),
    ("strategies", ["framework.strategies"]),
    ("components", ["framework.data", "framework.models", "framework.tasks"]),
    ("config", ["framework.config"]),
]
ROOT = Path(__file__).resolve().parent.parent


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The index of ``module``'s layer (the longest matching package wins; None: not layered)."""
    best, depth = None, -1
    for index, (_, packages) in enumerate(layers):
        for package in packages:
            matches = module == package or (module.startswith(package + ".") and package != "framework")
            if matches and package.count(".") > depth:
                best, depth = index, package.count(".")
    return best


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, those inside functions too (a lazy import is
    still a dependency); relative imports resolved against ``name``."""
    out = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((node.lineno, base))
    return out


def upward_imports(root: Path, layers=LAYERS) -> list[str]:
    """Every import of a module of ``root``'s package from a layer above its own."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root.parent)
        own = layer_of(name, layers)
        if own is None or name.startswith("framework.conf"):
            continue
        for line, target in imported(path, name):
            theirs = layer_of(target, layers) if target.startswith("framework") else None
            if theirs is not None and theirs < own:
                problems.append(
                    f"{path.relative_to(root.parent)}:{line}: {name} ({layers[own][0]}) imports "
                    f"{target} ({layers[theirs][0]}), a layer above it"
                )
    return problems


def test_every_module_imports_only_from_its_layer_or_below():
    assert upward_imports(ROOT / "framework") == []


def test_every_module_of_the_package_has_a_layer():
    unplaced = [
        module_name(p, ROOT)
        for p in (ROOT / "framework").rglob("*.py")
        if layer_of(module_name(p, ROOT)) is None and not module_name(p, ROOT).startswith("framework.conf")
    ]
    assert unplaced == []


def test_at_the_root_only_the_api_and_the_entry_points():
    root_modules = sorted(p.stem for p in (ROOT / "framework").glob("*.py"))
    assert root_modules == ["__init__", "api", "evaluate", "generate", "plan", "predict", "train"]


@pytest.mark.parametrize(
    "wrong",
    [
        "from framework.engine.trainer import Trainer\n",  # a strategy reaching up into the engine
        "def later():\n    from framework.rank import run\n",  # a lazy import counts too
    ],
)
def test_the_check_fails_on_a_deliberately_wrong_import(tmp_path, wrong):
    package = tmp_path / "framework"
    for sub in ("strategies", "engine", "rank"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engine" / "trainer.py").write_text("from framework.strategies import base\n")  # downward: fine
    (package / "strategies" / "base.py").write_text(wrong)
    problems = upward_imports(package)
    assert len(problems) == 1 and problems[0].startswith("framework/strategies/base.py:")
    assert "(strategies) imports framework." in problems[0] and "a layer above it" in problems[0]


def test_the_package_never_imports_the_hydra_plugins_beside_it():
    # hydra_plugins/ builds on framework (its launchers run jobs, write reports); the console finds
    # them through their entry points (pyproject.toml), so the arrow points one way only
    found = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in sorted((ROOT / "framework").rglob("*.py"))
        for line, target in imported(path, module_name(path, ROOT))
        if target.split(".")[0] == "hydra_plugins"
    ]
    assert found == []
