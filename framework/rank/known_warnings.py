"""Warnings of torch's that the framework knows to be harmless where it raises them: each is said
once, in the framework's words, on rank 0, instead of once per rank; every other warning is kept."""

from __future__ import annotations

import logging
import re
import warnings

log = logging.getLogger(__name__)

# (torch's message, why it does not matter here). Python warnings:
WARNINGS = [
    (
        re.compile(r"Slicing a flattened dim from root mesh will be deprecated"),
        "device mesh: FSDP's and the experts' meshes are taken from the job's one mesh by a flattened dimension's "
        "name (dp_shard x cp, or dp_outer for expert parallelism); torch means to deprecate that slicing in a "
        "later release, not to change what it gives",
    ),
    (
        re.compile(r"FSDP2-wrapped module \(\w+\) returned a view tensor"),
        "fsdp: the model's output is a view (tensor parallel's local logits); the tasks read it out of place, "
        "so its gradients are right (a task of your own must not change the model's output in place: x += y)",
    ),
]
# ... and torch's log records, by logger:
LOG_RECORDS = [
    (
        "torch.distributed.tensor._redistribute",
        re.compile(r"sequential all_reduce operations will be performed"),
        "fsdp x tp: the gradient norm for clipping is summed over dp_shard, then over tp (one all-reduce more per "
        "step); every rank gets the same sum",
    ),
    (
        "torch.utils._pytree",
        re.compile(r"is an Enum subclass and is now natively supported by torch.compile"),
        "torchao (QLoRA's NF4 weights; transformers imports it when installed) registers enums with an API this "
        "torch deprecates: nothing of a run depends on it",
    ),
]


class _Said:
    """What this process said already (each explanation once), and whether it speaks (rank 0)."""

    def __init__(self, speaks: bool):
        self.speaks, self.done = speaks, set()

    def once(self, explanation: str) -> None:
        if self.speaks and explanation not in self.done:
            self.done.add(explanation)
            log.info("%s", explanation)


class _KnownRecords(logging.Filter):
    def __init__(self, pattern: re.Pattern, explanation: str, said: _Said):
        super().__init__()
        self.pattern, self.explanation, self.said = pattern, explanation, said

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pattern.search(record.getMessage()):
            self.said.once(self.explanation)
            return False
        return True


def quiet_known_warnings(rank: int) -> None:
    """Install the filters in this process (once; rank 0 gives the explanations)."""
    if getattr(warnings.showwarning, "known_warnings", False):
        return
    said, shown = _Said(rank == 0), warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        explanation = next((ours for pattern, ours in WARNINGS if pattern.search(str(message))), None)
        if explanation is None:
            return shown(message, category, filename, lineno, file, line)
        said.once(explanation)

    showwarning.known_warnings = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning
    for name, pattern, explanation in LOG_RECORDS:
        logging.getLogger(name).addFilter(_KnownRecords(pattern, explanation, said))
