"""``python -m framework.train [group=option ...] [key=value ...]``: compose the experiment with
Hydra, validate it, train, test (framework/cli/train.py; the console script is framework-train)."""

from framework.cli.train import main

if __name__ == "__main__":
    main()
