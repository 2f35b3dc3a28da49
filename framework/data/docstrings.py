"""A labelled text set that ships with Python itself: the first paragraph of the docstrings of
standard-library modules (the module's, its public functions' and classes', and their methods'),
each labelled by the chapter of the Library Reference its module belongs to. About 870 documents
in 6 classes on CPython 3.11; nothing is downloaded. A text seen under two chapters keeps the first."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Iterator

CHAPTERS = {
    "dates and times": ["datetime", "time", "calendar", "zoneinfo"],
    "concurrency": ["threading", "multiprocessing.pool", "subprocess", "concurrent.futures", "queue", "sched"],
    "files and directories": ["os.path", "pathlib", "shutil", "glob", "fnmatch", "tempfile", "filecmp"],
    "internet data": ["json", "base64", "email.message", "mimetypes", "http.client", "urllib.parse", "html.parser"],
    "numbers and maths": ["math", "cmath", "decimal", "fractions", "random", "statistics"],
    "text processing": ["re", "string", "textwrap", "difflib", "unicodedata"],
}
SHORTEST = 30  # characters: shorter first paragraphs ("Return x.") say little of their chapter


def _docstrings(module) -> Iterator[object]:
    """The module's docstring, its own public members', and their public attributes'."""
    yield module.__doc__
    package = module.__name__.split(".")[0]
    for name, member in inspect.getmembers(module):
        if name.startswith("_") or not str(getattr(member, "__module__", package) or package).startswith(package):
            continue
        yield getattr(member, "__doc__", None)
        if inspect.isclass(member):
            yield from (
                getattr(attr, "__doc__", None)
                for attr_name, attr in inspect.getmembers(member)
                if not attr_name.startswith("_")
            )


@functools.lru_cache(maxsize=1)
def labelled_docstrings() -> tuple[tuple[str, str], ...]:
    """(text, chapter) pairs in a fixed order; read once per process (the check before start and
    the datamodule's setup both ask)."""
    seen, pairs = set(), []
    for chapter, modules in CHAPTERS.items():
        for name in modules:
            for doc in _docstrings(importlib.import_module(name)):
                if not isinstance(doc, str):
                    continue
                text = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
                if len(text) >= SHORTEST and text not in seen:
                    seen.add(text)
                    pairs.append((text, chapter))
    return tuple(pairs)
