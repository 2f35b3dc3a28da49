"""``optimizer.param_groups``: optimizer parameter groups declared by name patterns.

    optimizer:
      param_groups:
        - {params: "*.bias|*norm*", weight_decay: 0.0, name: no_decay}
        - {params: "backbone.*", lr: 1.0e-4}

Each entry's ``params`` is one or more ``fnmatch`` patterns (``|`` between them) over the
model's fully qualified parameter names; a parameter joins the first entry that matches it,
and the parameters no entry matches form the default group (the optimizer's own settings),
first. Pure Python over ``named_parameters()``: the validation uses it on a meta-device model
and every strategy on the model it wrapped (FSDP2's sharded parameters keep their names).
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Callable, Iterable, Sequence


def patterns(spec: dict) -> list[str]:
    return [p.strip() for p in str(spec.get("params", "")).split("|") if p.strip()]


def assign(names: Iterable[str], specs: Sequence[dict]) -> tuple[list[list[str]], list[str]]:
    """(the names each spec takes, the rest): each name goes to the first spec that matches it."""
    taken: list[list[str]] = [[] for _ in specs]
    rest = []
    compiled = [patterns(spec) for spec in specs]
    for name in names:
        index = next((i for i, pats in enumerate(compiled) if any(fnmatchcase(name, p) for p in pats)), None)
        (rest if index is None else taken[index]).append(name)
    return taken, rest


@dataclass(frozen=True)
class ParamGroups:
    """The entries of ``optimizer.param_groups`` (mappings with a ``params`` pattern and settings)."""

    specs: Sequence[dict]

    @classmethod
    def problems(cls, specs, allowed: Iterable[str] | None) -> list[str]:
        """What is wrong with the entries themselves: a list of mappings, each with a ``params``
        pattern and only keys the optimizer takes (``allowed``; None: any)."""
        if specs is None:
            return []
        if not isinstance(specs, (list, tuple)):
            return [f"optimizer.param_groups: expected a list of {{params: <pattern>, <setting>: ...}}, got {specs!r}"]
        problems = []
        allowed = None if allowed is None else sorted({*allowed, "params", "name"})
        for i, spec in enumerate(specs):
            key = f"optimizer.param_groups[{i}]"
            if not isinstance(spec, dict):
                problems.append(f"{key}: expected a mapping like {{params: '*.bias', weight_decay: 0.0}}, got {spec!r}")
                continue
            if not isinstance(spec.get("params"), str) or not patterns(spec):
                problems.append(
                    f"{key}.params: expected name patterns like '*.bias|*norm*', got {spec.get('params')!r}"
                )
            for unknown in sorted(k for k in spec if allowed is not None and k not in allowed):
                problems.append(f"{key}.{unknown}: not a setting of this optimizer; valid: {', '.join(allowed)}")
        return problems

    def match_problems(self, names: Sequence[str], taken: Sequence[list] | None = None) -> list[str]:
        """Entries that take no parameter of the model (``taken``: ``assign``'s answer, when known):
        a pattern matching nothing is a typo, or matches only parameters an earlier entry took."""
        taken = assign(names, self.specs)[0] if taken is None else taken
        problems = []
        for i, (spec, got) in enumerate(zip(self.specs, taken)):
            if not got:
                alone = [n for n in names if any(fnmatchcase(n, p) for p in patterns(spec))]
                why = "earlier entries took every parameter it matches" if alone else "it matches no parameter name"
                problems.append(
                    f"optimizer.param_groups[{i}].params: {spec.get('params')!r} takes no parameter ({why}); "
                    f"the model's names look like {', '.join(list(names)[:4])}"
                )
        return problems


def build_param_groups(named_parameters: Iterable, specs: Sequence[dict]) -> list[dict]:
    """The optimizer's ``params`` argument: the default group (unless empty), then one group per
    spec with its settings; an unnamed spec is named ``pg<index>``, the LR monitor's name."""
    params = dict(named_parameters)
    taken, rest = assign(params, specs)
    problems = ParamGroups(specs).match_problems(list(params), taken)
    if problems:
        raise ValueError("; ".join(problems))
    groups = [{"params": [params[n] for n in rest]}] if rest else []
    for spec, names in zip(specs, taken):
        settings = {k: v for k, v in spec.items() if k != "params"}
        settings.setdefault("name", f"pg{len(groups)}")
        groups.append({**settings, "params": [params[n] for n in names]})
    return groups


@dataclass(frozen=True)
class OptimizerFactory:
    """The configured optimizer (a partial missing its parameters) and its parameter groups;
    a strategy calls it with the parameters of the model it wrapped (``params_of``)."""

    partial: Callable
    param_groups: tuple = ()

    @property
    def func(self):
        return self.partial.func

    @property
    def keywords(self) -> dict:
        return self.partial.keywords

    def params_of(self, model) -> Iterable:
        return (
            build_param_groups(model.named_parameters(), self.param_groups) if self.param_groups else model.parameters()
        )

    def __call__(self, params):
        return self.partial(params)
