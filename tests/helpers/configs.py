"""Shrunk configs that train in well under a second, and readers of what a run wrote (its
metrics.csv, an offline W&B run file)."""

from __future__ import annotations

import csv

# A tiny MLP on digits, two short epochs, no progress bar: the base of most tests.
TINY = [
    "experiment=digits_mlp",
    "model.hidden_sizes=[32]",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=6",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "datamodule.batch_size=32",
]

# The equivalence runs: a small MLP, 2 epochs of 5 batches, accumulation of 2 (DDP's no_sync takes part).
BASE = [
    "experiment=digits_mlp",
    "model.hidden_sizes=[32,16]",
    "datamodule.batch_size=32",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=5",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "export_weights=true",
    "logger=csv",
    "seed=11",
    "trainer.accumulate_grad_batches=2",
]

# The built-in transformer, tiny (~35k parameters), on byte windows of Python's help text.
GPT_TINY = [
    "model=gpt/tiny",
    "datamodule=text",
    "task=language_modeling",
    "optimizer=adamw",
    "scheduler=none",
    "datamodule.batch_size=8",
    "datamodule.seq_len=32",
    "trainer.max_epochs=1",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "trainer.enable_progress_bar=false",
    "logger=csv",
    "trainer.accelerator=cpu",
    "seed=3",
    "strategy.timeout_s=60",
]

# Parameter groups, for the equivalence and resume tests (BASE's MLP): no weight decay on
# biases, their own lr for the first layer.
GROUPS = [
    "optimizer=adamw",
    "optimizer.lr=0.003",
    "optimizer.param_groups=[{params: '*.bias', weight_decay: 0.0}, {params: 'body.1.*', lr: 0.001, name: first}]",
]

# Epoch metrics that are not means of batch values: macro F1 (sum states) and AUROC (concatenated
# states, ragged across ranks), on train epochs too.
METRICS = [
    "task.train_metrics=true",
    "task.metrics={f1: {_target_: torchmetrics.classification.MulticlassF1Score, num_classes: 10, "
    "average: macro}, auroc: {_target_: torchmetrics.classification.MulticlassAUROC, num_classes: 10}}",
]

# The CNN (BatchNorm, dropout), 2 epochs of 4 steps.
CNN = [
    "experiment=digits_cnn",
    "datamodule.batch_size=32",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=4",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "logger=csv",
    "callbacks=none",
    "export_weights=true",
    "seed=5",
    "strategy.timeout_s=60",
]


def val_losses(output_dir) -> list[float]:
    """The val/loss column of a run's metrics.csv."""
    with open(output_dir / "metrics.csv") as f:
        return [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]


def train_losses(output_dir) -> list[float]:
    """The train/loss column of a run's metrics.csv."""
    with open(output_dir / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def wandb_records(run_file) -> list:
    """The protobuf records of an offline W&B run file (``run-<id>.wandb``): W&B's LevelDB-style
    log (a 7-byte file header, then 32 KiB blocks of records, each with a 7-byte header
    ``<checksum u32, length u16, type u8>``, type 1 = whole, 2/3/4 = first/middle/last part)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = open(run_file, "rb").read()
    assert data[:4] == b":W&B", run_file
    block, header, pos, parts, records = 32768, 7, 7, b"", []
    while pos + header <= len(data):
        if block - pos % block < header:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        parts += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records
