"""``strategy=auto`` on several devices: the candidates, each one's predicted memory per rank
(job/plan.py's accounting on the meta device), which fit ``trainer.memory_limit`` with the margin,
and why the others were dropped. The ranks get the candidates that fit, in order of preference;
they take the first, or with ``strategy.probe_steps`` the fastest (rank/strategy_probe.py).
"""

from __future__ import annotations

from dataclasses import fields

from framework.config import ConfigError
from framework.config.experiment import Experiment
from framework.config.schemas import AutoStrategyConfig
from framework.engine.memory import optimizer_state_bytes
from framework.job.experiment import ResolvedExperiment
from framework.job.model_size import memory_limit
from framework.job.plan import layout_bytes, meta_model
from framework.rank.strategy_probe import mib
from framework.strategies import StrategyNode, auto_candidates, layout_of, resolved_options

# In order of preference when nothing is measured: the least communication first, so that with
# no memory limit auto is ddp, as it always was.
DEFAULT_CANDIDATES = ("ddp", "zero", "fsdp_grad_op", "fsdp")
TENSOR_PARALLEL_CANDIDATES = ("fsdp_tp", "tp")  # for a model with a tensor-parallel plan
ALIASES = {"fsdp_grad_op": {"name": "fsdp", "sharding": "grad_op"}}


def is_auto(run: Experiment) -> bool:
    return run.strategy.get("name", "auto") == "auto" and not run.strategy.get("_target_")


def label(node: dict) -> str:
    """A candidate's name in tables: fsdp_grad_op for fsdp's grad_op sharding, deepspeed_<stage>."""
    name = node["name"]
    if name in ("fsdp", "hsdp") and node.get("sharding", "full") != "full":
        return f"{name}_{node['sharding']}"
    if name == "deepspeed" and node.get("stage"):
        return f"deepspeed_{node['stage']}"
    return name


def candidate_nodes(run: Experiment, model) -> list[dict]:
    """The configured candidates as strategy nodes ({name, ...options}), or the default ones."""
    listed = run.strategy.get("candidates")
    if listed is None:
        with_plan = callable(getattr(model, "parallelize_plan", None))
        listed = list(DEFAULT_CANDIDATES) + (list(TENSOR_PARALLEL_CANDIDATES) if with_plan else [])
    return [dict(ALIASES.get(c, {"name": c})) if isinstance(c, str) else dict(c) for c in listed]


def candidate_problems(run: Experiment) -> list[str]:
    """Each entry of ``strategy.candidates``: a strategy that starts one process per device under
    the elastic agent, named by a string or a node with its ``name``."""
    if not is_auto(run):
        return []
    listed = run.strategy.get("candidates")
    if listed is None:
        return []
    if not isinstance(listed, list) or not listed:
        return [f"strategy.candidates: expected a non-empty list of strategy names or nodes, got {listed!r}"]
    eligible = sorted([*auto_candidates(), *ALIASES])
    problems = []
    for i, entry in enumerate(listed):
        name = entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, dict) else None
        if name not in eligible:
            problems.append(
                f"strategy.candidates[{i}]: {entry!r} is not a strategy auto can choose (valid: "
                f"{', '.join(eligible)}; or a node such as {{name: fsdp, sharding: grad_op}})"
            )
    return problems


def plan_candidates(run: ResolvedExperiment) -> dict:
    """The decision's table before anything runs: each candidate's predicted bytes per rank and
    whether it fits, or why it was dropped."""
    model = meta_model(run)
    limit, source = memory_limit(run.trainer)
    margin = float(run.strategy.get("memory_margin", 0.1))
    budget = None if limit is None else int(limit * (1 - margin))
    k = optimizer_state_bytes(run.optimizer.node)
    devices, activations, rows = run.trainer.devices, {}, []
    for node in candidate_nodes(run, model):
        row = {"strategy": label(node), "options": node, "predicted_bytes": None, "fits": False, "dropped": None}
        rows.append(row)
        problems = StrategyNode(run.with_config(strategy=node)).problems()
        try:
            layout = layout_of(node, devices)
            cls, options = layout.strategy, layout.options
            problems = problems or cls.model_problems(options, layout.topology, model, run)
            figures = {} if problems else layout_bytes(run, cls, options, devices, model, k, activations)
        except ValueError as err:  # (options that lay out no topology on these devices)
            problems = problems or [str(err)]
        if problems:
            row["dropped"] = problems[0]
            continue
        state, acts = figures["model_state_bytes_per_rank"], figures["activation_bytes_per_rank"]
        row.update(model_state_bytes=state, activation_bytes=acts, predicted_bytes=state + (acts or 0))
        row["fits"] = budget is None or row["predicted_bytes"] <= budget
        if not row["fits"]:
            row["dropped"] = (
                f"does not fit: {mib(row['predicted_bytes'])} predicted per rank > {mib(budget)} "
                f"({1 - margin:.0%} of {mib(limit)})"
            )
    return {
        "memory_limit_bytes": limit,
        "memory_limit_source": source,
        "memory_margin": margin,
        "budget_bytes": budget,
        "candidates": rows,
    }


def auto_node(run: ResolvedExperiment) -> dict | None:
    """The strategy node the ranks get for ``strategy=auto`` on several processes (None: not auto,
    or one process, which is single as always). ConfigError when no candidate fits, naming each
    candidate's figure."""
    if not is_auto(run) or run.trainer.devices * run.trainer.num_nodes == 1:
        return None
    plan = plan_candidates(run)
    fitting = [row for row in plan["candidates"] if row["fits"]]
    if not fitting:
        raise ConfigError(
            [
                f"strategy=auto: no candidate fits {plan['memory_limit_source']}: "
                + "; ".join(f"{r['strategy']}: {r['dropped']}" for r in plan["candidates"])
                + "; raise trainer.memory_limit, use more devices, a smaller model or batch, or "
                "trainer.activation_checkpointing"
            ]
        )
    shared = {f.name: run.strategy.get(f.name, f.default) for f in fields(AutoStrategyConfig)}
    candidates = [
        resolved_options(run.with_config(strategy={**row["options"], "timeout_s": shared["timeout_s"]}))
        for row in fitting
    ]
    return {**shared, "name": "auto", "candidates": candidates, "plan": plan}
