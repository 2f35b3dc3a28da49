"""``datamodule=prompts``: prompt rows for reinforcement learning (``task=grpo``), in TRL's format
(framework/data/prompt_rows.py reads and checks them), and the answers' scorers' columns beside them.

A plain-text prompt is the model's input as it is; a prompt of messages is rendered by the tokenizer's chat
template (or ``template``: framework/data/chat.py) with an assistant's turn to follow. A prompt longer than
``seq_len`` tokens keeps its last ``seq_len`` (counted and logged). A batch of ``batch_size`` prompts (per
global micro-batch) is ``{input_ids, attention_mask, index}``, padded on the left to its longest, ``index``
each prompt's row in its split: the task samples its answers (``task.num_generations`` each) and passes the
row's other columns to the reward functions (``prompt_rows``). The default rows ship with the framework
(arithmetic.jsonl in framework/data/assets/, built by scripts/build_arithmetic_prompts.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from framework.data.conversations import ConversationsDataModule
from framework.data.prompt_rows import PROMPTS, prompt_messages
from framework.data.prompts import Prompts, prompt_ids

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).resolve().parent / "assets" / "arithmetic.jsonl"


class PromptsDataModule(ConversationsDataModule):
    """Batches of ``batch_size`` prompts (per global micro-batch) of at most ``seq_len`` tokens each, and
    their rows (``prompt_rows(stage)``)."""

    targets = "prompts"  # (what the task samples answers to: the checks before start match it)
    masks_targets = False
    ROWS, SHIPPED, FRACTIONS = PROMPTS, SHIPPED, (0.1, 0.0)

    def __init__(
        self,
        path: Optional[str] = None,
        tokenizer: Optional[str] = None,
        template: Optional[str] = None,
        system: Optional[str] = None,
        batch_size: int = 8,
        seq_len: int = 128,
        val_fraction: float = 0.1,
        test_fraction: float = 0.0,
        split_seed: int = 0,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        predict_prompts=(),
        predict_file: Optional[str] = None,
    ):
        super().__init__(path, tokenizer, template, system, batch_size, seq_len, val_fraction, test_fraction,
                         split_seed, num_workers, vocab_size, predict_prompts, predict_file)  # fmt: skip
        self.rows: dict[str, list[dict]] = {}

    @classmethod
    def row_columns(cls, path: Optional[str] = None, **_) -> set[str]:
        """The columns of the rows besides the prompt (what the reward functions may ask for), before start."""
        rows, _problems = cls.ROWS.checked(str(path or cls.SHIPPED))
        return {key for row in rows for key in row if key != "prompt"}

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        rows = self._rows()
        val, test, train = ([rows[i] for i in part] for part in self._splits(rows))
        self.rows = {"train": train, "val": val, "test": test}
        self.train_set, self.val_set, self.test_set = (
            self._encoded(part) if part else None for part in (train, val, test)
        )
        self._set_prompts()

    def prompt_rows(self, stage: str) -> list[dict]:
        """The rows of the split ``stage`` reads ("train", "val" or "test"), in the order of its ``index``."""
        return self.rows["train" if stage in ("fit", "train") else stage]

    def _encoded(self, rows: list[dict]) -> Prompts:
        """Each row's prompt as tokens (rendered where it is messages), the longest cut on the left."""
        encoded, cut = [], 0
        for row in rows:
            messages = prompt_messages(row, self.system)
            text = row["prompt"] if messages is None else self.renderer.render(messages, add_generation_prompt=True)
            ids = prompt_ids(self.codec, text)
            cut += len(ids) > self.seq_len
            encoded.append(ids[-self.seq_len :])
        if cut:
            log.warning(
                "datamodule: %d of %d prompts longer than seq_len=%d kept their last %d tokens (raise "
                "datamodule.seq_len to keep them whole)",
                *(cut, len(rows), self.seq_len, self.seq_len),
            )
        return Prompts(encoded, self.codec.pad)
