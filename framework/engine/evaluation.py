"""Validation, test and predict passes of one rank, in lockstep with the other ranks where the
strategy gathers sharded parameters inside forward (FSDP)."""

from __future__ import annotations

import contextlib

import torch
from torch.utils.data import DataLoader

from framework.engine.data_loaders import RankLoaders, batch_size_of, limit_batches
from framework.strategies.comm.collectives import all_reduce, gather_object
from framework.tasks.generation import DecodingLayout, decoding_layout


class EvaluationPasses:
    """Runs the task's ``step`` (or ``predict_step``) without gradients over a loader; metrics are
    sums of (value x samples) reduced over ranks, so their means equal single device's."""

    def __init__(self, task, strategy, precision, config, loaders: RankLoaders, epoch_metrics=None):
        self.task, self.strategy, self.precision, self.config = task, strategy, precision, config
        self.loaders, self.epoch_metrics = loaders, epoch_metrics
        self._names: dict[str, list[str]] = {}  # the metric names of each stage, in the reduced vector
        self._null = contextlib.nullcontext()
        self.counts_targets = False  # means weighted by counted targets (a datamodule that masks them)

    @torch.no_grad()
    def evaluate(self, trainer, loader, stage: str, sanity: bool = False) -> dict[str, float]:
        """Mean loss and metrics over ``loader`` on all ranks, logged and given to the callbacks.
        ``sanity``: the pre-training check; its results are neither logged nor shown to callbacks."""
        if loader is None:
            return {}
        limit = limit_batches(len(loader), getattr(self.config, f"limit_{stage}_batches"))
        if sanity and self.config.num_sanity_val_steps >= 0:
            limit = min(limit, self.config.num_sanity_val_steps)
        model = trainer.model
        was_training = model.training
        model.eval()
        if not sanity:
            trainer.callbacks.call("on_validation_start" if stage == "val" else "on_test_start", trainer)
        # (a task that generates in its step, task=grpo's held-out answers, runs as predict's generation does)
        with trainer.callbacks.weights_for(trainer, stage), decoding_layout(self.decoding):
            totals, count = self._evaluate_batches(model, loader, stage, limit)
        results = self._reduce(totals, count, stage, sanity)
        model.train(was_training)
        if sanity:
            return results
        if stage == "val":
            trainer.state.last_val_step = trainer.global_step
        trainer.log_metrics(results)
        trainer.callbacks.call("on_validation_end" if stage == "val" else "on_test_end", trainer, results)
        return results

    def _reduce(self, totals, count: int, stage: str, sanity: bool) -> dict[str, float]:
        names = self._names.get(stage, ["loss"])
        if totals is None:  # this rank had no batch; it still joins the reduction
            totals = torch.zeros(len(names), device=self.strategy.device)
        packed = torch.cat([totals, torch.tensor([float(count)], device=totals.device)])
        # Sums of (value x samples) and of samples: the mean equals single-device's exactly.
        summed = all_reduce(packed, "sum").tolist()
        results = {f"{stage}/{name}": summed[i] / summed[-1] for i, name in enumerate(names)} if summed[-1] else {}
        results.update(self._epoch_metric_values(stage, sanity or not summed[-1]))
        return results

    @torch.no_grad()
    def predict(self, trainer, loader: DataLoader):
        """Every rank's outputs over its first ``limit_predict_batches`` batches, on rank 0 in order."""
        from framework.engine.predictions import concat_outputs, interleave

        limit = limit_batches(len(loader), self.config.limit_predict_batches)
        batches = self._lockstep_batches(limit)
        outputs = []
        with self.inference(trainer) as model:
            for i, batch in enumerate(loader):
                if i >= limit:
                    break
                outputs.append(self._predict_step(model, self.loaders.on_device(batch)))
            for _ in range(batches - limit):  # lockstep forwards on a stand-in sample, results discarded
                self._predict_step(model, self.loaders.stand_in_batch(loader))
        # one copy of each data-parallel rank's outputs: the ranks of a tensor- or context-parallel group,
        # and the stages of a pipeline, predicted alike (the first stage's ranks come first, in the mesh)
        parts = gather_object(concat_outputs(outputs))
        t = self.strategy.topology
        group = t.tp * t.cp
        return interleave(parts[: t.data_parallel_size * group : group]) if trainer.is_global_zero else None

    @contextlib.contextmanager
    def inference(self, trainer):
        """Forwards outside training (predict, the harness's scoring): the trained model in eval mode with
        the weights callbacks choose for prediction, without gradients. Yields the model to call: the
        sharded one where forward gathers weights (every rank then runs each forward together: generation
        syncs its steps), else the plain model (a wrapper such as DDP would sync buffers in a forward
        the other ranks may not run)."""
        model, strategy = trainer.model, self.strategy
        was_training = model.training
        model.eval()
        try:
            with trainer.callbacks.weights_for(trainer, "predict"), decoding_layout(self.decoding), torch.no_grad():
                yield model if strategy.lockstep_forward else strategy.unwrap(model)
        finally:
            model.train(was_training)

    @property
    def decoding(self) -> DecodingLayout:
        """How generation runs its forwards on this strategy: every rank together where forward gathers
        sharded weights, each a multiple of the sequence-parallel degree."""
        strategy = self.strategy
        return DecodingLayout(strategy.lockstep_forward and strategy.world_size > 1, strategy.sequence_multiple)

    def _predict_step(self, model, batch):
        with self.precision.autocast():
            step = getattr(self.task, "predict_step", None)
            if step is not None:
                return step(model, batch)
            return model(batch[0] if isinstance(batch, (list, tuple)) else batch)

    def _epoch_metric_values(self, stage: str, discard: bool) -> dict[str, float]:
        """The task's epoch metrics of this pass, gathered over ranks; ``discard``: reset them
        instead (the sanity check, a pass without samples). Every rank calls it."""
        metrics = self.epoch_metrics
        if metrics is None or not metrics.tracks(stage):
            return {}
        if discard:
            metrics.reset(stage)
            return {}
        return {f"{stage}/{name}": value for name, value in metrics.compute(stage).items()}

    def _evaluate_batches(self, model, loader: DataLoader, stage: str, limit: int):
        """(sums of value x batch size, sample count) over this rank's first ``limit`` batches."""
        batches = self._lockstep_batches(limit)
        totals, count, batch = None, 0, None
        for i, raw in enumerate(loader):
            if i >= limit:
                break
            batch = self.loaders.on_device(raw)  # (the last one run stands in for the lockstep forwards)
            with self.precision.autocast(), self.strategy.step_context(model, batch) as local:
                loss, metrics = self.task.step(model, local, stage)
            # (masked targets: weighted by the targets each mean is over, as a single device's would be)
            size = self.task.counted(local[1]) if self.counts_targets else batch_size_of(batch)
            self._names.setdefault(stage, ["loss", *metrics])
            values = torch.stack([loss.float(), *(m.float() for m in metrics.values())]) * size
            totals = values if totals is None else totals + values
            count += size
        self._pad_forwards(model, loader, stage, batches - min(limit, len(loader)), batch)
        return totals, count

    def _lockstep_batches(self, limit: int) -> int:
        """The forwards this rank runs in a pass over its ``limit`` batches. Sharded parameters are
        gathered inside forward, a collective: a rank with fewer batches repeats forwards (results
        discarded) until every rank is done. Agreed before the first forward, so no rank is in
        another collective meanwhile."""
        if not self.strategy.lockstep_forward:
            return limit
        return int(all_reduce(torch.tensor(limit, device=self.strategy.device), "max").item())

    def _pad_forwards(self, model, loader: DataLoader, stage: str, repeats: int, batch) -> None:
        """``repeats`` extra forwards whose results are discarded (lockstep with the busiest rank)."""
        if batch is None and len(loader.dataset) and (repeats or stage not in self._names):
            # This rank got no sample (fewer samples than ranks). The dataset's first sample
            # stands in, never counted: for the lockstep forwards, and for the metric names,
            # which every rank needs to reduce the same vector.
            batch = self.loaders.stand_in_batch(loader)
            repeats = max(repeats, 1)
        for _ in range(repeats):
            paused = self.epoch_metrics.paused() if self.epoch_metrics else self._null
            with self.precision.autocast(), paused, self.strategy.step_context(model, batch) as local:
                _, metrics = self.task.step(model, local, stage)
            self._names.setdefault(stage, ["loss", *metrics])
