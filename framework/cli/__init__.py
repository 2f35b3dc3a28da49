"""The command line: the console scripts (train, evaluate, predict, plan) and the Hydra glue they
share. Imports no torch on import (``--help``, ``--cfg`` and shell completion answer at once).
May import: job and every layer below it."""
