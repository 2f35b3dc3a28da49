"""``python -m framework.plan [overrides]``: per-rank memory of each strategy and device count,
predicted before anything trains (framework/cli/plan.py prints framework/job/plan.py's figures)."""

from framework.cli.plan import main


def __getattr__(name: str):
    if name in ("activation_bytes", "plan"):
        from framework.job import plan

        return getattr(plan, name)
    raise AttributeError(f"module 'framework.plan' has no attribute {name!r}")


if __name__ == "__main__":
    main()
