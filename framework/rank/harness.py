"""The harness stage: the run's model scored on EleutherAI's lm-evaluation-harness tasks
(``harness.tasks``), offline, after the test and predict stages; results.json's ``harness``.

Tasks are found by name in the tasks that ship with the framework (framework/data/assets/harness:
``stdlib_modules``, ``stdlib_modules_answer``, ``stdlib_topics``, built from Python's own text), in
``harness.include_path`` (task YAMLs of your own, with data on disk), and only then in lm-eval's own
catalogue (whose data must already be in the datasets cache: nothing downloads).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from framework.config.schemas import HarnessConfig

log = logging.getLogger(__name__)

SHIPPED_TASKS = Path(__file__).resolve().parents[1] / "data" / "assets" / "harness"


def task_manager(names: list[str], include_path: Optional[str] = None):
    """lm-eval's TaskManager over the shipped tasks and ``include_path``; over its own catalogue too
    (about 13 s to index) only when a name is in neither."""
    from lm_eval.tasks import TaskManager

    paths = [str(SHIPPED_TASKS), *([str(include_path)] if include_path else [])]
    manager = TaskManager(include_path=paths, include_defaults=False)
    if all(name in manager.all_tasks for name in names):
        return manager
    return TaskManager(include_path=paths)


def unknown_tasks(names: list[str], include_path: Optional[str] = None) -> list[tuple[str, Optional[str]]]:
    """(name, the closest name lm-eval knows or None) of each name it knows nothing of."""
    import difflib

    manager = task_manager(names, include_path)
    known = list(manager.all_tasks)
    return [
        (name, next(iter(difflib.get_close_matches(name, known, n=1)), None))
        for name in names
        if name not in manager.all_tasks
    ]


def score(settings: HarnessConfig, trainer, parts, ckpt: Optional[Path], output_dir: str) -> Optional[dict]:
    """Every task's metrics on rank 0 (None on the others), logged as ``harness/<task>/<metric>``; with
    ``log_samples``, each question's answers in ``<output_dir>/harness/<task>.jsonl``. Collective: every
    rank scores its share of each task's requests (framework/rank/harness_lm.py)."""
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads
    import lm_eval

    from framework.rank.harness_lm import FrameworkLM

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    names = [str(n) for n in settings.tasks]
    manager = task_manager(names, settings.include_path)
    fresh = trainer.model is None
    with trainer.inference(parts.model if fresh else None, ckpt if fresh else None) as model:
        lm = FrameworkLM(
            model,
            trainer.strategy,
            parts.datamodule.codec,
            eos=getattr(parts.task, "eos", None) or parts.datamodule.special_tokens["eos"],
            batch_size=settings.batch_size,
            autocast=trainer.precision.autocast,
        )
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=names,
            task_manager=manager,
            num_fewshot=settings.num_fewshot,
            limit=settings.limit,
            log_samples=settings.log_samples,
            verbosity="WARNING",
        )
    if not trainer.is_global_zero or results is None:
        return None
    if settings.log_samples:
        write_samples(results["samples"], Path(output_dir))
    scores = summary(results)
    log.info("Harness: %s", "; ".join(f"{t}: {_line(m)}" for t, m in scores.items()))
    # beside the test metrics: the loggers, results.json's metrics, a sweep's objective
    trainer.log_metrics(
        {
            f"harness/{task}/{name}": value
            for task, metrics in scores.items()
            for name, value in metrics.items()
            if name != "samples" and "stderr" not in name
        }
    )
    return scores


def write_samples(samples: dict, output_dir: Path) -> None:
    """Each task's questions with the model's answers (lm-eval's ``--log_samples``, less the documents)."""
    import json

    directory = output_dir / "harness"
    directory.mkdir(exist_ok=True)
    for task, rows in samples.items():
        kept = [{k: v for k, v in row.items() if k not in ("doc", "arguments")} for row in rows]
        (directory / f"{task}.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in kept))


def summary(results: dict) -> dict:
    """{task: {metric: value, ..., "samples": n}} of lm-eval's results: a metric of the filter "none"
    under its own name (``acc``, ``acc_stderr``), another filter's as ``metric:filter`` (lm-eval's
    "metric,filter": a comma would split a command line's value into a sweep)."""
    out = {}
    for task, values in results["results"].items():
        metrics = {}
        for key, value in values.items():
            name, _, where = key.partition(",")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and where:
                metrics[name if where == "none" else f"{name}:{where}"] = float(value)
        samples = (results.get("n-samples") or {}).get(task, {})
        out[task] = {**metrics, **({"samples": samples["effective"]} if "effective" in samples else {})}
    return out


def _line(metrics: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in metrics.items() if "stderr" not in k and k != "samples")
