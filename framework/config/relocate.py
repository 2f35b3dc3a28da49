"""Move a resolved config to another run directory."""

from __future__ import annotations

from typing import Any


def relocate(node: Any, old: str, new: str) -> Any:
    """Replace the path prefix ``old`` by ``new`` in every string of a plain container.

    Resolved configs carry absolute paths derived from ``output_dir`` (logger save_dir,
    checkpoint dirpath); this is how they follow the run to another directory."""
    if isinstance(node, dict):
        return {k: relocate(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [relocate(v, old, new) for v in node]
    if isinstance(node, str) and (node == old or node.startswith(old.rstrip("/") + "/")):
        return new + node[len(old) :]
    return node
