"""``datamodule=tokens``: a corpus that ``framework-prepare-data`` tokenized once, read window by
window (``seq_len`` tokens) from its shards (token_windows.py), so it may be far larger than memory.

The engine's sampler deals the windows to the data-parallel ranks without overlap, shuffled by
(seed, epoch), and a checkpoint's loop position resumes the stream exactly, under any world size: the
global order of windows is the same, only its split across ranks differs. ``document_boundaries``:
batches carry each token's position in its document, and the model attends within documents only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from framework.config.ranges import Range
from framework.data.base import BaseDataModule
from framework.data.prompts import prompt_file_problems, prompt_set, read_prompts, records
from framework.data.text import Codec
from framework.data.token_shards import (
    SPLITS,
    corpus_change,
    identity,
    read_index,
    shard_problems,
    split_tokens,
    tokenizer_fingerprint,
)
from framework.data.token_windows import TokenWindows

log = logging.getLogger(__name__)


def _index_or_problem(path: Optional[str]) -> tuple[Optional[dict], list[str]]:
    if path == "???":
        return None, []  # named as a missing value
    if not path:
        return None, ["path: missing; the directory framework-prepare-data wrote (its output=)"]
    try:
        return read_index(path), []
    except (FileNotFoundError, ValueError) as err:
        return None, [f"path: {err}"]


def _tokenizer_problems(index: dict, tokenizer: Optional[str]) -> list[str]:
    """``tokenizer`` (when given) is the one the corpus was prepared with."""
    from framework.data.tokenizer_files import tokenizer_file

    if not tokenizer:
        return []
    try:
        ours = tokenizer_fingerprint(tokenizer_file(tokenizer))
    except (OSError, ValueError) as err:
        return [f"tokenizer: '{tokenizer}' is not a tokenizers JSON file or a directory holding one ({err})"]
    prepared = index["tokenizer"]
    if ours == prepared["fingerprint"]:
        return []
    return [
        f"tokenizer: '{tokenizer}' is not the tokenizer the corpus was prepared with "
        f"({prepared['file'] or 'UTF-8 bytes'}, fingerprint {prepared['fingerprint']} against {ours}); "
        "prepare the corpus with this tokenizer, or train with that one"
    ]


class TokensDataModule(BaseDataModule):
    """Batches of (inputs, targets) windows [batch, seq_len], with positions [batch, seq_len] when
    ``document_boundaries``. ``vocab_size`` is the prepared corpus's (read from its index)."""

    inputs, targets = "token ids", "next tokens"

    argument_ranges = {"seq_len": Range(low=1)}

    def __init__(
        self,
        path: str,
        batch_size: int = 32,
        seq_len: int = 128,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        tokenizer: Optional[str] = None,
        document_boundaries: bool = False,
        predict_prompts: Optional[Sequence[str]] = None,
        predict_file: Optional[str] = None,
    ):
        super().__init__(batch_size, num_workers)
        self.path, self.seq_len, self.document_boundaries = path, seq_len, document_boundaries
        self.index, self.tokenizer, self._codec = read_index(path), tokenizer, None
        self._pinned: Optional[list] = None  # the train shards a resumed epoch keeps (load_state_dict)
        self.reload_next_epoch = False
        prompts = read_prompts(predict_file) or predict_prompts
        self.predict_prompts = list(prompts) if prompts is not None else None
        if vocab_size is not None and vocab_size != self.index["vocab_size"]:
            raise ValueError(
                f"datamodule.vocab_size: {vocab_size}, but the corpus at {path} has {self.index['vocab_size']} tokens"
            )

    @property
    def vocab_size(self) -> int:
        return self.index["vocab_size"]

    @classmethod
    def check_config(
        cls,
        path: Optional[str] = None,
        seq_len: int = 128,
        vocab_size: Optional[int] = None,
        tokenizer: Optional[str] = None,
        predict_file: Optional[str] = None,
        **_,
    ) -> list[str]:
        index, problems = _index_or_problem(path)
        problems += prompt_file_problems(predict_file)
        if index is None:
            return problems
        problems += [f"path: {p}" for p in shard_problems(path, index)]
        problems += _tokenizer_problems(index, tokenizer)
        if isinstance(vocab_size, int) and vocab_size != index["vocab_size"]:
            problems.append(
                f"vocab_size: {vocab_size}, but the corpus at {path} has {index['vocab_size']} tokens; "
                "leave it to the corpus's index (the default)"
            )
        train = split_tokens(index, "train")
        if isinstance(seq_len, int) and seq_len >= 1 and train <= seq_len:
            problems.append(
                f"seq_len: the corpus's train split has {train} tokens, not enough for one window of "
                f"{seq_len} (and its next token)"
            )
        return problems

    @classmethod
    def train_samples(cls, path: Optional[str] = None, seq_len: int = 128, **_) -> Optional[int]:
        """The training windows of the corpus, known before start from its index (None when unknown)."""
        index, problems = _index_or_problem(path)
        if index is None or not isinstance(seq_len, int) or seq_len < 1:
            return None
        return max(0, split_tokens(index, "train") - 1) // seq_len

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        problems = shard_problems(self.path, self.index)
        if problems:
            raise FileNotFoundError("datamodule.path: " + "; ".join(problems))
        sets = {split: self._windows(self.index["splits"].get(split, [])) for split in SPLITS}
        self.train_set, self.val_set, self.test_set = (sets[s] if len(sets[s]) else None for s in SPLITS)

    def _windows(self, shards: list[dict]) -> TokenWindows:
        return TokenWindows(self.path, shards, self.index["dtype"], self.seq_len, self.document_boundaries)

    # ---- a checkpoint's record of the corpus (Lightning's DataModule state_dict / load_state_dict) ----
    def state_dict(self) -> dict:
        """What the corpus is (its shards and their checksums, per split): a resume checks it."""
        return {"path": str(self.path), "identity": identity(self.index)}

    def load_state_dict(self, state: dict) -> None:
        """Resume on the corpus a checkpoint trained on. Grown since (shards appended): the interrupted
        epoch continues over the windows it had (the train split pinned to the saved shards), the new
        ones join from the next epoch (``reload_next_epoch``). Otherwise changed: ValueError naming how."""
        change = corpus_change(state.get("identity") or {}, identity(self.index))
        if change is None:
            return
        if change != "grown":
            raise ValueError(
                f"datamodule.path: the corpus at {self.path} changed since the checkpoint was taken: {change}; resume "
                "on the corpus it trained on, or start a new run from its weights (init.weights=<checkpoint>)"
            )
        saved = len(state["identity"]["train"])
        self._pinned = self.index["splits"]["train"][:saved]
        log.info(
            "The corpus at %s grew since the checkpoint (%d train shards, %d before): the interrupted epoch "
            "continues over the windows it had; the new ones join from the next epoch",
            self.path,
            len(self.index["splits"]["train"]),
            saved,
        )

    def train_dataloader(self):
        """The train windows; after a resume on a grown corpus, first the saved ones (for the rest of the
        interrupted epoch), then, asked again (the engine does at the next epoch), all of them."""
        self.reload_next_epoch = self._pinned is not None
        if self._pinned is None:
            return super().train_dataloader()
        pinned, self._pinned = self._windows(self._pinned), None
        return self._loader(pinned, shuffle=True)

    @property
    def codec(self) -> Codec:
        """The corpus's own tokenizer (or bytes), loaded when first used: what prompts are encoded and
        generations decoded with."""
        if self._codec is None:
            self._codec = Codec(self.tokenizer or self.index["tokenizer"]["file"])
        return self._codec

    @property
    def special_tokens(self) -> dict:
        """The tokenizer's end of sequence (``eos``, a list) and ``pad`` ids, for generation."""
        return {"eos": list(self.codec.special["eos"]), "pad": self.codec.pad}

    def predict_dataloader(self):
        """``predict_prompts`` to continue; without them, the test windows' ends."""
        if self.predict_prompts is not None:
            self.predict_set = self.predict_set or prompt_set(self.codec, self.predict_prompts)
        return super().predict_dataloader()

    def prediction_records(self, predictions) -> list[dict]:
        """predictions.jsonl's rows: each prompt (none for a test window), its continuation and those tokens."""
        return records(self.codec, self.predict_prompts or [], predictions)

    def __repr__(self) -> str:
        return f"TokensDataModule({Path(self.path)}, seq_len={self.seq_len})"
