"""``framework-plan [overrides]`` (``python -m framework.plan``): per-rank memory of each strategy and
device count, predicted before anything trains (framework/job/plan.py says how)."""

from __future__ import annotations

import sys

from framework.cli.compose import compose
from framework.cli.console import cwd_importable
from framework.config.group_choices import null_selections, unknown_options
from framework.rank.known_warnings import quiet_known_warnings


def main() -> None:
    from framework.engine.memory import optimizer_state_bytes
    from framework.job.experiment import ResolvedExperiment
    from framework.job.plan import __doc__ as plan_doc
    from framework.job.plan import plan, plan_problems

    if {"-h", "--help"} & set(sys.argv[1:]):
        print(f"usage: framework-plan [--choose] [group=option ...] [key=value ...]\n{__doc__}\n{plan_doc}")
        return
    cwd_importable()
    quiet_known_warnings(0)  # (building the model imports what warns: transformers, torchao)
    choose, args = "--choose" in sys.argv[1:], [a for a in sys.argv[1:] if a != "--choose"]
    unknown = unknown_options(args) + null_selections(args)  # (as framework-train names them)
    if unknown:
        print("\n".join(unknown), file=sys.stderr)
        sys.exit(2)
    run = ResolvedExperiment.of(compose(args))  # (its size and layout worked out once, for the check and the plan)
    if choose:
        sys.exit(print_choice(run))
    problems = plan_problems(run)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(2)
    rows = plan(run)
    params = rows[0]["parameters"]
    k = optimizer_state_bytes(run.optimizer.node)
    print(f"{run.name}: {params:,} parameters, fp32, {run.optimizer.target} ({k} B/param of state)")
    width = max(8, *(len(r["strategy"]) for r in rows))
    print(f"{'strategy':<{width}} " + " ".join(f"{n:>12} dev" for n in (1, 2, 4, 8)))
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        cells = [r["model_state_bytes_per_rank"] for r in rows if r["strategy"] == strategy]
        print(
            f"{strategy:<{width}} "
            + " ".join(f"{c / 2**20:>12.2f} MiB" if c is not None else f"{'-':>16}" for c in cells)
        )
    _print_activations(run, rows, width)
    _print_pipeline(rows, width)
    _print_comm(rows, width)
    _print_adapters(rows, width)


# Layouts whose ranks hold a part of each activation: (row label, strategy row, how)
SPLIT_ACTIVATIONS = [
    ("tp act.", "tp", "sequence parallelism splits them across the group"),
    ("cp act.", "parallel/cp", "each rank holds its part of every sequence (cp 2, the rest data parallel)"),
]


def _print_activations(run, rows: list[dict], width: int) -> None:
    """The activations a training forward keeps per rank, when the input shape is known."""
    from framework.strategies import planned

    acts = [r["activation_bytes_per_rank"] for r in rows if r["strategy"] == planned()[0]]
    if any(a is None for a in acts):
        print(
            "activations: not estimated; the model's input shape is datamodule.input_shape, which this "
            "datamodule does not set (the built-in ones do)"
        )
    else:
        checkpointed = list(run.trainer.activation_checkpointing)
        print(
            f"{'activ.':<{width}} "
            + " ".join(f"{a / 2**20:>12.2f} MiB" for a in acts)
            + f"   saved for backward per rank, batch {run.datamodule.get('batch_size')}/N"
            + (f", checkpointing {checkpointed}" if checkpointed else "")
        )
        for label, strategy, note in SPLIT_ACTIVATIONS:
            split = [r["activation_bytes_per_rank"] for r in rows if r["strategy"] == strategy]
            if split:
                cells = " ".join(f"{a / 2**20:>12.2f} MiB" if a is not None else f"{'-':>16}" for a in split)
                print(f"{label:<{width}} {cells}   estimated: {note}")


def print_choice(run) -> int:
    """``--choose``: what strategy=auto decides for this run before the probe, without training."""
    from framework.config import ConfigError
    from framework.job.strategy_choice import candidate_problems, plan_candidates
    from framework.rank.strategy_probe import decision_lines

    run = run.with_config(strategy={**run.strategy, "name": "auto"})
    if run.trainer.devices * run.trainer.num_nodes == 1:
        print("strategy=auto on 1 device is single; give trainer.devices=N to see the choice among N-device layouts")
        return 0
    try:
        problems = candidate_problems(run)
        plan = None if problems else plan_candidates(run)
    except ConfigError as err:
        problems = err.problems
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    fitting = [row["strategy"] for row in plan["candidates"] if row["fits"]]
    steps = run.strategy.get("probe_steps") or 0
    print("\n".join(decision_lines(plan, chosen=fitting[0] if fitting and not steps else None)))
    if not fitting:
        print("no candidate fits: the run would be refused before it starts")
        return 2
    if steps and len(fitting) > 1:
        print(f"probe: {steps} steps of each of {', '.join(fitting)} in the run's launch; the fastest is chosen")
    return 0


def _print_pipeline(rows: list[dict], width: int) -> None:
    pp = [r for r in rows if r["strategy"] == "pp"]
    if not pp:
        return
    acts = [r["activation_bytes_per_rank"] for r in pp]
    schedule = next(
        (
            f"{r['schedule']}, {r['microbatches']} micro-batches on {r['devices']} devices"
            for r in pp
            if "schedule" in r and r["devices"] > 1
        ),
        "",
    )
    print(
        f"{'pp act.':<{width}} "
        + " ".join(f"{a / 2**20:>12.2f} MiB" if a is not None else f"{'-':>16}" for a in acts)
        + f"   the first stage's, micro-batches in flight ({schedule}; strategy=pp's options, else 1f1b)"
    )
    print(
        f"{'bubble':<{width}} "
        + " ".join(f"{r['bubble_fraction']:>15.1%} " if "bubble_fraction" in r else f"{'-':>16}" for r in pp)
        + "   idle share of each stage: (p - 1) / (m + p - 1)"
    )


def _print_comm(rows: list[dict], width: int) -> None:
    """Each layout's bytes sent per rank per step, and by degree on its most devices."""
    if not any("comm_bytes_per_rank" in r for r in rows):
        return
    print("sent per rank per optimizer step (estimated from ring collectives' counts, fp32), and by degree:")
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        figures = [r.get("comm_bytes_per_rank") for r in mine]
        cells = " ".join(f"{sum(f.values()) / 2**20:>12.2f} MiB" if f is not None else f"{'-':>16}" for f in figures)
        widest = next((r for r in reversed(mine) if r.get("comm_bytes_per_rank")), None)
        split = (
            f"   on {widest['devices']} dev: "
            + " + ".join(f"{k} {v / 2**20:.2f}" for k, v in widest["comm_bytes_per_rank"].items())
            if widest
            else ""
        )
        print(f"{strategy:<{width}} {cells}{split}")


def _print_adapters(rows: list[dict], width: int) -> None:
    """With adapters: the parameters that train on each rank, and the optimizer state they keep."""
    if not any("trainable_parameters_per_rank" in r for r in rows):
        return
    print("adapters: trainable parameters per rank (and their optimizer state):")
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == strategy]
        cells = " ".join(
            (
                f"{r['trainable_parameters_per_rank']:,} ({r['optimizer_state_bytes_per_rank'] / 2**10:,.0f} KiB)"
                if r.get("trainable_parameters_per_rank") is not None
                else "-"
            ).rjust(20)
            for r in mine
        )
        print(f"{strategy:<{width}} {cells}")


if __name__ == "__main__":
    main()
