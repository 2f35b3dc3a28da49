"""``python -m framework.predict ckpt_path=<run>/checkpoints/<name> [overrides]``: predict with a
saved checkpoint (framework/cli/evaluate.py's predict); from Python, ``predict(ckpt_path, overrides, output_dir)``
(framework/api.py, imported when first used)."""

from framework.cli.evaluate import predict as main


def __getattr__(name: str):
    if name == "predict":
        from framework.api import predict

        return predict
    raise AttributeError(f"module 'framework.predict' has no attribute {name!r}")


if __name__ == "__main__":
    main()
