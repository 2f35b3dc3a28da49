"""What the datamodules of conversations share (``datamodule=instructions``, ``preferences``): the
tokenizer and its chat template (or the config's ``template``: framework/data/chat.py), a ``system``
prompt before every conversation, the splits, the prompts to answer with predict=true, and their rows
read and every one checked (``ROWS``: framework/data/row_files.py) before start and where the rank
reads them; an example fitted into a window (``fit_window``) and shifted into inputs and targets, the
targets -100 but on the answers."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Optional, Sequence

from torch.utils.data import DataLoader

from framework.config.ranges import Range
from framework.data.base import BaseDataModule, split_indices, train_split_size
from framework.data.chat import Renderer, encode_example
from framework.data.prompts import PromptsToContinue, prompt_set, read_prompts
from framework.data.row_files import RowFile
from framework.data.text import Codec

IGNORE = -100  # the targets the loss leaves out (the task's ignore_index)


def fit_window(ids: list, trained: list, size: int) -> tuple[list, list, str]:
    """The example within ``size`` tokens: its earliest untrained (prompt) tokens dropped first, then,
    if its response alone is longer, the response cut at its end; and what was done ("", "prompt",
    "response")."""
    if len(ids) <= size:
        return ids, trained, ""
    drop = 0
    while len(ids) - drop > size and not trained[drop]:
        drop += 1
    ids, trained = ids[drop:], trained[drop:]
    return (ids, trained, "prompt") if len(ids) <= size else (ids[:size], trained[:size], "response")


def shifted(ids: list, trained: list) -> tuple[list, list]:
    """(inputs, targets): each token predicts the next, counted only where the next is trained."""
    return ids[:-1], [t if keep else IGNORE for t, keep in zip(ids[1:], trained[1:])]


class ConversationsDataModule(PromptsToContinue, BaseDataModule):
    """A datamodule of conversations' rows (``ROWS``, shipped ``SHIPPED``): ``batch_size`` rows per
    global batch, the responses' tokens the only targets; ``FRACTIONS``: the default validation and
    test shares."""

    inputs = "token ids"
    masks_targets = True  # (the loss: a mean over the global batch's counted targets)
    argument_ranges = {"seq_len": Range(low=2)}
    ROWS: ClassVar[RowFile]
    SHIPPED: ClassVar[Path]
    FRACTIONS: ClassVar[tuple[float, float]] = (0.05, 0.05)

    def __init__(
        self,
        path: Optional[str] = None,
        tokenizer: Optional[str] = None,
        template: Optional[str] = None,
        system: Optional[str] = None,
        batch_size: int = 8,
        seq_len: int = 256,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        split_seed: int = 0,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        predict_prompts: Sequence[str] = (),
        predict_file: Optional[str] = None,
    ):
        super().__init__(batch_size, num_workers)
        self.path, self.seq_len, self.system = path, seq_len, system
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.codec, self.renderer = Codec(tokenizer), Renderer(tokenizer, template)
        if vocab_size is not None and vocab_size != self.codec.vocab_size:
            raise ValueError(f"datamodule.vocab_size: {vocab_size}, but the tokens number {self.codec.vocab_size}")
        self.predict_prompts, self.counts = read_prompts(predict_file) or list(predict_prompts), {}

    @property
    def vocab_size(self) -> int:
        return self.codec.vocab_size

    @classmethod
    def check_config(
        cls,
        path: Optional[str] = None,
        tokenizer: Optional[str] = None,
        template: Optional[str] = None,
        system: Optional[str] = None,
        seq_len: int = 256,
        **rest,
    ) -> list[str]:
        """Before start: the tokenizer, the template, every row of the data (as setup reads them again),
        a system prompt that leaves room in a window and splits that leave rows to train on; keyed
        relative to the datamodule."""
        problems = Codec.problems(tokenizer, rest.get("vocab_size"))
        problems += cls.prompt_file_problems(rest.get("predict_file"))
        problems += Renderer.template_problems(template)
        rows, found = cls.ROWS.checked(str(path or cls.SHIPPED))
        if not problems and system:
            problems += cls._system_problems(tokenizer, template, system, seq_len)
        fractions = rest.get("val_fraction", cls.FRACTIONS[0]), rest.get("test_fraction", cls.FRACTIONS[1])
        return problems + found + (cls.split_problems(len(rows), *fractions) if rows and not found else [])

    @classmethod
    def train_rows(
        cls, path: Optional[str] = None, val_fraction: float = None, test_fraction: float = None, **_
    ) -> Optional[int]:
        """The rows of the training split (those ``val_fraction`` and ``test_fraction`` leave), counted before
        start (the rows read once: ``RowFile.count``); None where they do not read (their own check says why)."""
        rows = cls.ROWS.count(str(path or cls.SHIPPED))
        fractions = [cls.FRACTIONS[0] if val_fraction is None else val_fraction]
        fractions.append(cls.FRACTIONS[1] if test_fraction is None else test_fraction)
        return train_split_size(rows, fractions) if rows is not None else None

    @classmethod
    def train_samples(cls, **options) -> Optional[int]:
        """The training samples: one a row (a conversation, a pair)."""
        return cls.train_rows(**options)

    @classmethod
    def _system_problems(cls, tokenizer: Optional[str], template: Optional[str], system: str, seq_len) -> list[str]:
        """A ``system`` prompt whose turn fills a window of ``seq_len`` tokens: every example would lose
        its start (fit_window drops the earliest tokens first)."""
        if not isinstance(system, str) or not isinstance(seq_len, int):
            return []  # (named by the type and range checks)
        try:
            tokens = system_tokens(Renderer(tokenizer, template, say=False), Codec(tokenizer), system)
        except Exception:  # noqa: BLE001 - a chat template may refuse a lone system turn: setup's check stands
            return []
        if tokens < seq_len:
            return []
        return [
            f"system: its turn is {tokens} tokens, and a window holds seq_len={seq_len}: every example would be "
            "cut, losing the start of the system prompt (an example longer than a window loses its earliest "
            f"tokens); shorten datamodule.system or raise datamodule.seq_len well above {tokens}"
        ]

    def _rows(self) -> list[dict]:
        """The data's rows, every one checked (a ConfigError naming the bad ones, as before start)."""
        return self.ROWS.read(str(self.path or self.SHIPPED))

    def _splits(self, items: list) -> tuple[list[int], list[int], list[int]]:
        """The validation, test and training rows' indices."""
        return tuple(split_indices(len(items), [self.val_fraction, self.test_fraction], self.split_seed))

    def _set_prompts(self) -> None:
        """The prompts to answer with predict=true, each a user's turn (after ``system``'s)."""
        system = [{"role": "system", "content": self.system}] if self.system else []
        rendered = [self.renderer.render([*system, {"role": "user", "content": p}], True) for p in self.predict_prompts]
        self.predict_set = prompt_set(self.codec, rendered) if rendered else None

    def predict_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.predict_set, shuffle=False) if self.predict_set is not None else None


def system_tokens(renderer: Renderer, codec: Codec, system: str) -> int:
    """The tokens of a conversation's system turn alone (``datamodule.system``'s)."""
    return len(encode_example(renderer, codec, [{"role": "system", "content": system}], None)[0])
