"""The harness stage: the run's model scored on EleutherAI's lm-evaluation-harness tasks
(``harness.tasks``), offline, after the test and predict stages; results.json's ``harness``.

Tasks are found by name in the tasks that ship with the framework (framework/data/assets/harness:
``stdlib_modules``, ``stdlib_modules_answer``, ``stdlib_topics``, built from Python's own text), in
``harness.include_path`` (task YAMLs of your own, with data on disk), and only then in lm-eval's own
catalogue (whose data must already be in the datasets cache: nothing downloads).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
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


def _leaves(tasks: dict):
    """(name, task) of every task in lm-eval's task dict (a group's tasks within it)."""
    for key, value in tasks.items():
        if isinstance(value, dict):
            yield from _leaves(value)
        else:
            yield str(key), value


SHOWN = 5  # the problems of a task's rows named one by one; the rest counted


@dataclass(frozen=True)
class HarnessTasks:
    """The tasks of the run's ``harness`` settings, as lm-eval finds them (the shipped ones, those of
    ``include_path``, its own) and builds their questions."""

    settings: HarnessConfig

    @property
    def names(self) -> list[str]:
        return [str(n) for n in self.settings.tasks]

    def include_problems(self) -> list[str]:
        """The task YAMLs of ``harness.include_path`` that do not parse (lm-eval skips them, and then
        knows no such task): each named, with the parser's line and reason."""
        import yaml

        class Loader(yaml.SafeLoader):  # lm-eval's tags (!function) read as anything
            pass

        Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
        problems = []
        for path in sorted(Path(str(self.settings.include_path)).rglob("*.y*ml")):
            try:
                yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
            except (yaml.YAMLError, UnicodeDecodeError) as err:
                where = getattr(err, "problem_mark", None)
                line = f" line {where.line + 1}" if where is not None else ""
                reason = getattr(err, "problem", None) or _first(err)
                problems.append(f"harness.include_path: '{path}'{line} does not parse as YAML: {reason}")
        return problems

    def problems(self, codec, positions: Optional[int]) -> list[str]:
        """Before start: each task builds its requests as lm-eval will build them (its rows read, its
        few-shot examples drawn) and they fit a model of ``positions`` (None: no limit) with the tokenizer
        ``codec`` (framework/data/text.py): lm-eval truncates a context on the left (as scoring here
        does), but no continuation may take every position, no generation every position but one, and
        no task may be asked for more few-shot examples than it holds."""
        from lm_eval.tasks import get_task_dict

        names, settings = self.names, self.settings
        with lm_eval_quietly(Path(tempfile.mkdtemp(prefix="framework-harness-"))):
            try:
                tasks = get_task_dict(names, task_manager(names, settings.include_path))
            except Exception as err:  # noqa: BLE001 - lm-eval raises what a task's own code and files raise
                return [f"harness.tasks: lm-eval cannot load {', '.join(names)}: {type(err).__name__}: {_first(err)}"]
            return [p for name, task in _leaves(tasks) for p in self._one_task(name, task, codec, positions)]

    def _one_task(self, name: str, task, codec, positions: Optional[int]) -> list[str]:
        from lm_eval.defaults import DEFAULT_OTHER_SEED
        from lm_eval.evaluator_utils import get_sample_size

        settings = self.settings
        problems = self._row_problems(name, task)
        if problems:
            return problems
        default = task.get_config("num_fewshot")
        shots = settings.num_fewshot if settings.num_fewshot is not None and default != 0 else (default or 0)
        if shots:
            pool = task.fewshot_docs()
            held = len(list(pool)) if pool is not None else 0
            held -= task.config.fewshot_split in (None, task.config.test_split)  # (a question is never its own example)
            if shots > held:
                return [
                    f"harness.num_fewshot: {shots} examples, but task '{name}' has {max(held, 0)} to draw them from; "
                    f"set harness.num_fewshot={max(held, 0)} or less"
                ]
        task.set_config(key="num_fewshot", value=shots)
        task.set_fewshot_seed(seed=DEFAULT_OTHER_SEED)  # (simple_evaluate's)
        try:
            task.build_all_requests(limit=get_sample_size(task, settings.limit), rank=0, world_size=1)
        except Exception as err:  # noqa: BLE001 - a task's own templates and functions raise anything
            return [f"harness.tasks: task '{name}' cannot build its questions: {type(err).__name__}: {_first(err)}"]
        return self._length_problems(name, task.instances, codec, positions)

    @staticmethod
    def _row_problems(name: str, task) -> list[str]:
        """Each question of ``task`` renders (its text, target and choices): a malformed row, named."""
        bad, choosing = [], task.OUTPUT_TYPE == "multiple_choice"
        for i, doc in enumerate(task.eval_docs):
            row = f"harness.tasks: task '{name}' row {i}"
            try:
                task.doc_to_text(doc)
                target = task.doc_to_target(doc)
                choices = task.doc_to_choice(doc) if choosing else []
            except Exception as err:  # noqa: BLE001 - a task's templates and functions raise anything
                bad.append(f"{row}: {type(err).__name__}: {_first(err)}")
                continue
            if choosing and (not isinstance(choices, (list, tuple)) or not choices):
                bad.append(f"{row}: its choices are {choices!r}, not a list of answers")
            elif choosing and isinstance(target, int) and not 0 <= target < len(choices):
                bad.append(f"{row}: its answer {target} is not one of its {len(choices)} choices")
        more = [f"harness.tasks: task '{name}': {len(bad) - SHOWN} more rows like these"] if len(bad) > SHOWN else []
        return bad[:SHOWN] + more

    @staticmethod
    def _length_problems(name: str, instances, codec, positions: Optional[int]) -> list[str]:
        """What the longest answer to score and the most new tokens take of the model's ``positions``."""
        from framework.rank.harness_lm import DEFAULT_GEN_TOKS, continuation_ids

        if positions is None:
            return []
        scored = [continuation_ids(codec, *i.args) for i in instances if i.request_type == "loglikelihood"]
        longest = max((len(ids) for ids in scored), default=0)
        generated = [i.args[1] for i in instances if i.request_type == "generate_until"]
        new = max((int(kwargs.get("max_gen_toks", DEFAULT_GEN_TOKS)) for kwargs in generated), default=0)
        fix = "raise the model's positions (datamodule.seq_len, model.max_seq_len) or leave the task out"
        problems = []
        if longest >= positions:
            problems.append(
                f"harness.tasks: task '{name}' scores answers of up to {longest} tokens, but the model holds "
                f"{positions} positions and a question needs one of them; {fix}"
            )
        if new >= positions:
            problems.append(
                f"harness.tasks: task '{name}' generates up to {new} new tokens (its max_gen_toks), but the model "
                f"holds {positions} positions and a question needs one of them; {fix}"
            )
        return problems


def _first(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0]


def score(
    settings: HarnessConfig, trainer, parts, ckpt: Optional[Path], output_dir: str, prefix: str = "harness"
) -> Optional[dict]:
    """Every task's metrics on rank 0 (None on the others), logged as ``<prefix>/<task>/<metric>``; with
    ``log_samples``, each question's answers in ``<output_dir>/<prefix>/<task>.jsonl``. Collective: every
    rank scores its share of each task's requests (framework/rank/harness_lm.py). The datasets a task
    loads are cached inside the run, and removed after (nothing is written outside the run)."""
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads
    import lm_eval

    from framework.rank.harness_lm import FrameworkLM

    names = [str(n) for n in settings.tasks]
    fresh = trainer.model is None
    scratch = Path(output_dir) / "harness" / f".datasets-rank{trainer.strategy.rank}"
    with lm_eval_quietly(scratch), trainer.inference(parts.model if fresh else None, ckpt if fresh else None) as model:
        manager = task_manager(names, settings.include_path)
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
            limit=_limit(settings, trainer.config),
            log_samples=settings.log_samples,
            verbosity="WARNING",
        )
    if not trainer.is_global_zero or results is None:
        return None
    if settings.log_samples:
        write_samples(results["samples"], Path(output_dir) / prefix)
    return _logged(summary(results), trainer, prefix)


def _limit(settings: HarnessConfig, trainer_config) -> Optional[float]:
    """The questions per task: ``harness.limit``; under ``trainer.fast_dev_run`` (a check of the
    pipeline), as many as its batches."""
    if trainer_config.fast_dev_run:
        return 1 if trainer_config.fast_dev_run is True else int(trainer_config.fast_dev_run)
    return settings.limit


def _logged(scores: dict, trainer, prefix: str) -> dict:
    """``scores`` in the log and, as ``<prefix>/<task>/<metric>``, beside the test metrics: the loggers,
    results.json's metrics, a sweep's objective."""
    where = " on start" if prefix != "harness" else ""
    log.info("Harness%s: %s", where, "; ".join(f"{t}: {_line(m)}" for t, m in scores.items()))
    trainer.log_metrics(
        {
            f"{prefix}/{task}/{name}": value
            for task, metrics in scores.items()
            for name, value in metrics.items()
            if name != "samples" and "stderr" not in name
        }
    )
    return scores


@contextlib.contextmanager
def lm_eval_quietly(cache: Path):
    """lm-eval offline, with the datasets its tasks load cached in ``cache`` (removed after; a cache the
    user named, HF_DATASETS_CACHE, is theirs and kept), no progress bars or notes, and none of the environment
    report it adds to its results (``git describe``, which prints "fatal: not a git repository" outside a
    checkout, and torch's collect_env, which starts programs): results.json records what ran."""
    os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"  # nothing downloads
    import datasets
    import lm_eval.api.model as model_module
    import lm_eval.api.task as task_module
    import lm_eval.evaluator as evaluator
    from tqdm import tqdm

    loggers = [logging.getLogger(name) for name in ("lm-eval", "lm_eval")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:  # (its notes on every task of ours: "Custom kwargs can be passed to --metadata")
        logger.setLevel(logging.ERROR)
    datasets.utils.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    named = os.environ.get("HF_DATASETS_CACHE")
    settings = [
        (datasets.config, "HF_DATASETS_CACHE", Path(named) if named else cache),
        (datasets.config, "HF_HUB_OFFLINE", True),  # (read by datasets on import, which may have come first)
        (evaluator, "get_git_commit_hash", lambda: None),
        (evaluator, "add_env_info", lambda storage: None),
        (task_module, "tqdm", functools.partial(tqdm, disable=True)),  # ("Building contexts": a bar a task)
        (model_module, "tqdm", functools.partial(tqdm, disable=True)),  # ("Tokenizing inputs")
    ]
    before = [getattr(owner, name) for owner, name, _ in settings]
    for owner, name, value in settings:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for (owner, name, _), value in zip(settings, before):
            setattr(owner, name, value)
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if not named:
            shutil.rmtree(cache, ignore_errors=True)
            if cache.parent.is_dir() and not any(cache.parent.iterdir()):
                cache.parent.rmdir()


def write_samples(samples: dict, directory: Path) -> None:
    """Each task's questions with the model's answers (lm-eval's ``--log_samples``, less the documents)."""
    import json

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
