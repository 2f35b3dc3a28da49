"""``python -m framework.evaluate ckpt_path=<checkpoint dir> [key=value ...]``

Runs the test loop on a checkpoint's weights with the config its run saved
(``<run dir>/config.yaml``, the run dir being the checkpoint's ``checkpoints/`` parent),
changed by any ``key=value`` overrides (e.g. ``trainer.devices=2 strategy=ddp`` is not a
group here: use ``strategy.name=ddp``). Writes its own results to
``<run dir>/eval/<date>_<time>/`` (or ``output_dir=...``); the run's files are untouched.
"""
from __future__ import annotations

import datetime as _dt
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from framework.config import ConfigError
from framework.config.relocate import relocate

log = logging.getLogger("framework.evaluate")


def evaluate(ckpt_path: str, overrides: list[str] = (), output_dir: str | None = None) -> dict:
    """Test the checkpoint ``ckpt_path``; returns the evaluation's results.json contents."""
    from framework.api import fit

    ckpt = Path(ckpt_path)
    saved = ckpt.resolve().parent.parent / "config.yaml"
    if not saved.is_file():
        raise ConfigError([f"ckpt_path: no run config at '{saved}' (expected <run dir>/checkpoints/<checkpoint>)"])
    run_dir = str(saved.parent)
    output_dir = output_dir or str(saved.parent / "eval" / _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f"))
    # The saved config is resolved: paths under the run dir (loggers, checkpoints) move to the eval dir.
    container = relocate(OmegaConf.to_container(OmegaConf.load(saved)), run_dir, output_dir)
    cfg = OmegaConf.merge(container, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    with open_dict(cfg):
        cfg.train, cfg.test, cfg.ckpt_path, cfg.output_dir = False, True, str(ckpt.resolve()), output_dir
    return fit(cfg, output_dir=output_dir)


def main() -> None:
    args = sys.argv[1:]
    if not any(a.startswith("ckpt_path=") for a in args):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ckpt = next(a.split("=", 1)[1] for a in args if a.startswith("ckpt_path="))
    output_dir = next((a.split("=", 1)[1] for a in args if a.startswith("output_dir=")), None)
    rest = [a for a in args if not a.startswith(("ckpt_path=", "output_dir="))]
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    try:
        results = evaluate(ckpt, rest, output_dir)
    except ConfigError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
    print({k: round(v, 4) for k, v in results.get("metrics", {}).items()})


if __name__ == "__main__":
    main()
