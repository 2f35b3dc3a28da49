"""Whether a directory a run will write to can be created and written, found before anything starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def unwritable(key: str, path: Path) -> str | None:
    """Why ``path`` cannot be created or written (None: it can), found by creating and removing an
    empty directory in its nearest existing ancestor: nothing stays behind."""
    ancestor = path if path.exists() else next((p for p in path.parents if p.exists()), Path("/"))
    if not ancestor.is_dir():
        return f"{key}: cannot create '{path}': '{ancestor}' is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".framework-write-check-", dir=ancestor))
    except OSError as err:
        return f"{key}: cannot write to '{path}': {err.strerror} in '{ancestor}'"
    return None
