"""The structure of ``framework/``: no function longer than a limit, and no import cycle, neither between
its modules nor between its packages (framework.engine, framework.config, ...). tests/test_structure.py
runs it; a lazy import inside a function counts as an import.

    python scripts/structure.py [ROOT] [LIMIT]    # from the project root: . 50; exit 1 on a finding
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 50  # lines of a function, its signature and docstring included


def modules(root: Path) -> dict[str, Path]:
    """Every module of ``root``'s framework package, by its dotted name (a package by its own)."""
    found = {}
    for path in (root / "framework").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (``from a import b``: ``a`` and ``a.b``, which may be one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def scan(root: Path, limit: int) -> tuple[list[str], dict[str, set[str]]]:
    """(each function over ``limit`` lines as ``path:line name lines``, each module's imports of the others)."""
    found = modules(root)
    long, edges = [], {name: set() for name in found}
    for name, path in found.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} {lines}")
            for target in _imported(node):
                while target and target not in found:  # (a name imported from a module: that module)
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):  # (not its own package)
                    edges[name].add(target)
    return long, edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, followers = work[-1]
            follower = next(followers, None)
            if follower is not None:
                if follower not in index:
                    index[follower] = low[follower] = len(index)
                    stack.append(follower)
                    work.append((follower, iter(sorted(edges.get(follower, ())))))
                elif follower in stack:
                    low[node] = min(low[node], index[follower])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                found += [sorted(component)] if len(component) > 1 else []
    return found


def packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module imports as imports between the framework's packages (framework.engine.loop: framework.engine)."""

    def top(module: str) -> str:
        return ".".join(module.split(".")[:2])

    between: dict[str, set[str]] = {}
    for module, imported in edges.items():
        between.setdefault(top(module), set()).update(top(t) for t in imported if top(t) != top(module))
        for target in imported:
            between.setdefault(top(target), set())
    return between


def findings(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    """Every function over ``limit`` lines and every import cycle (of modules, then of packages), one line each."""
    long, edges = scan(root, limit)
    found = [f"cycle: {' <-> '.join(c)}" for c in cycles(edges) + cycles(packages(edges))]
    return found + [f"long: {line}" for line in long]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else ROOT
    limit = int(argv[1]) if len(argv) > 1 else LIMIT
    found = findings(root, limit)
    print(
        "\n".join(
            found
            + [
                f"{sum(f.startswith('long') for f in found)} functions over {limit} lines, "
                f"{sum(f.startswith('cycle') for f in found)} import cycles"
            ]
        )
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
