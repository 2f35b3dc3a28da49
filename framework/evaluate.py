"""``python -m framework.evaluate ckpt_path=<run>/checkpoints/<name> [overrides]``: test a saved
checkpoint (framework/cli/evaluate.py); from Python, ``evaluate(ckpt_path, overrides, output_dir)``
(framework/api.py, imported when first used: ``--help`` imports no torch)."""

from framework.cli.evaluate import main


def __getattr__(name: str):
    if name == "evaluate":
        from framework.api import evaluate

        return evaluate
    raise AttributeError(f"module 'framework.evaluate' has no attribute {name!r}")


if __name__ == "__main__":
    main()
