"""The stages of one rank's job, in order: transfer-learning init, fit (or resume), export the
final weights, test, predict, lm-evaluation-harness scores. Each runs when the config asks for it; the
Trainer runs the loops."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import torch

from framework.config.experiment import Experiment
from framework.engine.checkpoint_files import is_checkpoint, resolve_ckpt_path
from framework.engine.predictions import write_predictions
from framework.engine.trainer import Trainer
from framework.rank.build import Components, apply_configured_init
from framework.rank.on_start import beside
from framework.rank.tested_weights import record, test_checkpoint

log = logging.getLogger(__name__)


def run_stages(run: Experiment, trainer: Trainer, parts: Components, signals=None) -> dict:
    """Every stage ``run`` asks for; returns what results.json says of them (with the seconds fit, test,
    predict and the harness each took: ``fit_time_s``, ``test_time_s``, ``predict_time_s``,
    ``harness_time_s``; the sweep report subtracts them from the sweep's wall time). Training stops at a
    step boundary on a stop signal (``signals``); the stages after it stop at once (StopNow)."""
    out: dict = {}
    init = apply_configured_init(run, parts.model)
    if init is not None:
        out["init"] = init
    ckpt = resume_point(run)
    if run.train:  # (an evaluation or a prediction has no fit time)
        t0 = time.perf_counter()
        trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory, parts.scheduler, ckpt_path=ckpt)
        out.update(fit_time_s=time.perf_counter() - t0)
        on_start = parts.callbacks.get("harness_on_start")
        if on_start is not None and on_start.scores is not None:  # (the base's scores, beside the trained ones)
            out["harness_start"] = on_start.scores
    if trainer.interrupted:
        return out
    with signals.at_once() if signals is not None else contextlib.nullcontext():
        if run.export_weights and trainer.model is not None:
            export_weights(run, trainer, getattr(parts.datamodule, "class_names", None))
        if run.test:
            t2 = time.perf_counter()
            out.update(test(run, trainer, parts, ckpt))
            out.update(test_time_s=time.perf_counter() - t2)
        elif run.train and (run.predict or run.harness.tasks):
            out.update(tested_weights(trainer, run))
        if run.predict:
            t3 = time.perf_counter()
            out["predictions"] = predict(run, trainer, parts, ckpt)
            out.update(predict_time_s=time.perf_counter() - t3)
        if run.harness.tasks:
            from framework.rank.harness import score  # here: lm-eval imports in seconds

            t4 = time.perf_counter()
            try:
                out["harness"] = score(run.harness, trainer, parts, ckpt, str(run.output_dir))
            except Exception as err:  # noqa: BLE001 - scores come after: the training's results stay whole
                out["harness_error"] = f"{type(err).__name__}: {err}"
                log.error("The harness failed (the run's other results are kept): %s", out["harness_error"])
            out.update(harness_time_s=time.perf_counter() - t4)
    return out


def export_weights(run: Experiment, trainer: Trainer, labels: list | None = None) -> None:
    """The final weights as one full ``model.pt`` or ``model.safetensors``, or the directory
    ``model_hf/`` (``export_format``; a classifier's with ``labels``, the data's class names), before a
    test on best/last loads others. Collective: every rank gathers sharded weights; rank 0 writes."""
    weights = trainer.strategy.full_state_dict(trainer.model)
    if not trainer.is_global_zero:
        return
    adapters = getattr(trainer.strategy.unwrap(trainer.model), "adapter_settings", None)
    if adapters is not None and run.export_merge:  # the adapters folded into the base's weights
        from framework.models.lora import merged_weights

        weights = merged_weights(weights, adapters)
    export_format = run.export_format or "pt"
    if export_format == "hf":
        trainer.strategy.unwrap(trainer.model).save_hf(Path(run.output_dir) / "model_hf", weights, labels)
        return
    path = Path(run.output_dir) / f"model.{export_format}"
    tmp = path.with_name(f".{path.name}.tmp")  # written beside, then renamed: never half a file
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        # one tensor per name, each its own contiguous storage (safetensors refuses shared ones)
        save_file({k: v.detach().contiguous().clone() for k, v in weights.items()}, str(tmp))
    else:
        torch.save(weights, tmp)
    os.replace(tmp, path)


def test(run: Experiment, trainer: Trainer, parts: Components, ckpt: Path | None) -> dict:
    """After training: the weights ``test_ckpt`` names. Evaluation only: the checkpoint's weights
    (or the model as built)."""
    if not run.train:
        trainer.test(parts.datamodule, model=parts.model, ckpt_path=ckpt)
        return {}
    which, path = test_checkpoint(run)
    trainer.test(parts.datamodule, ckpt_path=path)
    return {"test_ckpt": record(which, path)}


def tested_weights(trainer: Trainer, run: Experiment) -> dict:
    """Without a test: the weights ``test_ckpt`` names (best, last) loaded for the predictions and the
    harness, as a test would have loaded them."""
    which, path = test_checkpoint(run)
    if path is not None:
        trainer.use_weights(path)
    return {"test_ckpt": record(which, path)}


def predict(run: Experiment, trainer: Trainer, parts: Components, ckpt: Path | None) -> dict | None:
    """The predict loop on the weights just tested or trained (with neither: the checkpoint's,
    or the model as built); rank 0 writes them to predictions.<predict_format>."""
    fresh = trainer.model is None
    predictions = trainer.predict(
        parts.datamodule, model=parts.model if fresh else None, ckpt_path=ckpt if fresh else None
    )
    if predictions is None:  # the other ranks, or nothing to predict
        return None
    records = getattr(parts.datamodule, "prediction_records", None)
    on_start = getattr(parts.callbacks.get("predictions_on_start"), "predictions", None)
    if records is not None and on_start is not None:  # the base's continuations beside the trained ones
        records = lambda p, _records=records: beside(_records(p), _records(on_start))  # noqa: E731
    path = write_predictions(predictions, Path(run.output_dir), run.predict_format, records)
    samples = len(predictions if isinstance(predictions, torch.Tensor) else next(iter(predictions.values())))
    log.info("Wrote the predictions of %d samples to %s", samples, path)
    return {"path": str(path), "samples": samples}


def resume_point(run: Experiment) -> Path | None:
    """The checkpoint to resume from: ``ckpt_path``; after an elastic restart, this run's own
    ``last`` (the failed attempt's progress) when it has one."""
    ckpt = resolve_ckpt_path(str(run.ckpt_path), str(run.output_dir)) if run.ckpt_path else None
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    own = resolve_ckpt_path("last", str(run.output_dir))
    if restart and is_checkpoint(own):
        log.warning("Restart %d: resuming from %s", restart, own)
        return own
    if ckpt is not None and not ckpt.exists():  # ckpt_path=last before any was written (a requeued job)
        log.warning("ckpt_path=last: no checkpoint in %s yet; starting from the beginning", ckpt.parent)
        return None
    return ckpt
