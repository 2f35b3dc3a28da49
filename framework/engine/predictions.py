"""Predictions: each rank's outputs put back in dataset order, and written to a file.

The engine's evaluation sampler gives rank r of W the positions r, r+W, r+2W, ... of the
dataset, and batch k of every rank together covers positions [k*B, (k+1)*B) (B: the global
batch). So the first n batches of all ranks cover a prefix of the dataset, and interleaving
the ranks' outputs (rank r's j-th sample at position r + j*W) restores its order exactly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

FORMATS = ("pt", "csv", "jsonl")


def concat_outputs(outputs: Sequence[Any]) -> Any:
    """One rank's per-batch outputs (tensors, or mappings of tensors) joined along the batch
    dimension, on the CPU; None when there are none."""
    if not outputs:
        return None
    first = outputs[0]
    if isinstance(first, Mapping):
        return {key: concat_outputs([o[key] for o in outputs]) for key in first}
    if isinstance(first, torch.Tensor) and first.dim():
        return torch.cat([o.detach().cpu() for o in outputs])
    raise TypeError(
        f"predict_step returned {type(first).__name__}; it must return a tensor with a batch dimension "
        "or a mapping of name -> tensor"
    )


def interleave(parts: Sequence[Any]) -> Any:
    """The ranks' outputs (``parts[r]``: rank r's, or None) in dataset order."""
    present = [p for p in parts if p is not None]
    if not present:
        return None
    if isinstance(present[0], Mapping):
        return {key: interleave([p[key] if p is not None else None for p in parts]) for key in present[0]}
    world, total = len(parts), sum(len(p) for p in present)
    out = present[0].new_empty((total, *present[0].shape[1:]))
    for rank, part in enumerate(parts):
        if part is not None and len(part):
            out[rank::world][: len(part)] = part
    return out


def write_predictions(predictions: Any, directory: Path, fmt: str, records=None) -> Path:
    """``predictions.<fmt>`` in ``directory``: ``pt`` holds the tensor (or mapping) as returned;
    ``csv`` one row per sample: ``index``, then one column per output value (``<name>_<i>``);
    ``jsonl`` one JSON object per sample: ``records(predictions)`` when the datamodule has them
    (a text's prompt and continuation), else ``index`` and the outputs as lists."""
    path = directory / f"predictions.{fmt}"
    if fmt == "pt":
        torch.save(predictions, path)
        return path
    if fmt == "jsonl":
        rows = records(predictions) if records is not None else _rows(predictions)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path
    columns = predictions if isinstance(predictions, Mapping) else {"output": predictions}
    flat = {name: t.reshape(len(t), -1) for name, t in columns.items()}
    header = ["index"] + [
        name if t.shape[1] == 1 else f"{name}_{i}" for name, t in flat.items() for i in range(t.shape[1])
    ]
    values = [t.tolist() for t in flat.values()]  # integer outputs stay integers
    with open(path, "w", newline="") as f:  # (csv)
        writer = csv.writer(f)
        writer.writerow(header)
        for i in range(len(values[0]) if values else 0):
            writer.writerow([i, *(v for column in values for v in column[i])])
    return path


def _rows(predictions: Any) -> list[dict]:
    columns = predictions if isinstance(predictions, Mapping) else {"output": predictions}
    length = len(next(iter(columns.values())))
    return [{"index": i, **{name: t[i].tolist() for name, t in columns.items()}} for i in range(length)]
