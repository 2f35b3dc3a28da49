"""Command-line overrides, made lenient so that our validator sees every mistake at once.

Hydra rejects ``trainer.max_epoch=3`` (a typo) at composition with "Key 'max_epoch' is
not in struct", one key at a time and without a suggestion. Rewriting plain dotted
overrides to Hydra's force-add form (``++trainer.max_epoch=3``) lets the value reach
``validate``, which reports it with the closest valid key, together with every other
problem. Group selections (``model=mlp``, ``hydra/launcher=joblib``), ``hydra.*`` keys and
overrides that already carry ``+``, ``++`` or ``~`` are left as they are.
"""
from __future__ import annotations

import re

_PLAIN_DOTTED = re.compile(r"^(?![+~])(?!hydra\.)[A-Za-z_][\w\-]*(\.[\w\-]+)+=")


def lenient(overrides: list[str]) -> list[str]:
    return [f"++{o}" if _PLAIN_DOTTED.match(o) else o for o in overrides]
