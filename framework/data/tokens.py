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
from typing import Optional, Sequence, Union

import numpy as np

from framework.config.experiment import Experiment
from framework.config.ranges import Range, are_ints
from framework.data.base import BaseDataModule
from framework.data.mixture import MixedWindows, source_names
from framework.data.prompts import PromptsToContinue, prompt_set, read_prompts
from framework.data.text import Codec
from framework.data.token_shards import (
    SPLITS,
    PreparedCorpus,
    corpus_change,
    identity,
    max_token_id,
    read_index,
    split_tokens,
    tokenizer_fingerprint,
)
from framework.data.token_windows import TokenWindows
from framework.data.tokenizer_files import data_vocabulary, tokenizer_file

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


def _joined(sets: list):
    """The non-empty sets one after another (None: none)."""
    from torch.utils.data import ConcatDataset

    sets = [s for s in sets if len(s)]
    return ConcatDataset(sets) if sets else None


class TokensDataModule(PromptsToContinue, BaseDataModule):
    """Batches of (inputs, targets) windows [batch, seq_len], with positions [batch, seq_len] when
    ``document_boundaries``. ``vocab_size`` is the prepared corpus's (read from its index). ``path`` a
    list: several corpora of one tokenizer mixed by ``weights`` (framework/data/mixture.py; null: by
    their sizes), their validation and test splits one after another."""

    inputs, targets = "token ids", "next tokens"

    argument_ranges = {"seq_len": Range(low=1)}

    def __init__(
        self,
        path: Union[str, list],
        batch_size: int = 32,
        seq_len: int = 128,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        tokenizer: Optional[str] = None,
        document_boundaries: bool = False,
        predict_prompts: Optional[Sequence[str]] = None,
        predict_file: Optional[str] = None,
        weights: Optional[list] = None,
    ):
        super().__init__(batch_size, num_workers)
        self.seq_len, self.document_boundaries, self.weights = seq_len, document_boundaries, weights
        self.paths = [str(p) for p in path] if isinstance(path, (list, tuple)) else [str(path)]
        self.path, self.indexes = self.paths[0], [read_index(p) for p in self.paths]
        self.index, self.tokenizer, self._codec = self.indexes[0], tokenizer, None
        self._pinned: Optional[list] = None  # the train shards a resumed epoch keeps (load_state_dict)
        self.reload_next_epoch = False
        prompts = read_prompts(predict_file) or predict_prompts
        self.predict_prompts = list(prompts) if prompts is not None else None
        if vocab_size is not None and vocab_size != self.vocab_size:
            raise ValueError(
                f"datamodule.vocab_size: {vocab_size}, but the corpus at {path} has {self.vocab_size} tokens"
            )

    @property
    def vocab_size(self) -> int:
        return max(index["vocab_size"] for index in self.indexes)

    @property
    def mixed(self) -> bool:
        return len(self.paths) > 1

    @classmethod
    def check_config(
        cls,
        path: Union[str, list, None] = None,
        seq_len: int = 128,
        vocab_size: Optional[int] = None,
        tokenizer: Optional[str] = None,
        predict_file: Optional[str] = None,
        weights: Optional[list] = None,
        **_,
    ) -> list[str]:
        paths = list(path) if isinstance(path, (list, tuple)) else [path]
        problems = cls.prompt_file_problems(predict_file)
        indexes = []
        for one in paths:
            index, found = cls._corpus_problems(one, seq_len, vocab_size, tokenizer)
            key = f"path ({one})" if len(paths) > 1 else "path"
            problems += [p.replace("path: ", f"{key}: ", 1) for p in found]
            indexes.append(index)
        if len(paths) > 1:
            problems += MixedWindows.problems([str(p) for p in paths], indexes, weights)
        elif weights is not None:
            problems.append("weights: given for one corpus; name several in datamodule.path=[A,B] to mix them")
        return problems

    @classmethod
    def _tokenizer_problems(cls, index: dict, tokenizer: Optional[str]) -> list[str]:
        """``tokenizer`` (when given) is the one the corpus was prepared with."""
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

    @classmethod
    def _corpus_problems(cls, path, seq_len, vocab_size, tokenizer) -> tuple[Optional[dict], list[str]]:
        """One prepared corpus's index and what is wrong with it, its shards, its tokenizer, its vocabulary
        and its train split's length."""
        index, problems = _index_or_problem(path)
        if index is None:
            return None, problems
        problems += [f"path: {p}" for p in PreparedCorpus(path, index).problems()]
        problems += cls._tokenizer_problems(index, tokenizer)
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
        return index, problems

    @classmethod
    def check_run(cls, run: Experiment) -> list[str]:
        """Before start, from the corpus's index: token ids within the model's embedding, the corpus
        tokenized by the model's own tokenizer, positions for a model whose forward takes them."""
        return (
            cls._token_ids_problems(run)
            + cls._prepared_tokenizer_problems(run)
            + cls._document_boundaries_problems(run)
        )

    @classmethod
    def _token_ids_problems(cls, run: Experiment) -> list[str]:
        """A prepared corpus's largest token id (its index records each shard's) within the model's
        embedding: a larger one failed inside the ranks ("index out of range"), naming no file."""
        data = run.datamodule
        vocabulary = run.model.sizes().get("vocab_size")
        declared = data_vocabulary(data)
        if not data.get("path") or not are_ints(vocabulary) or (are_ints(declared) and declared > vocabulary):
            return []  # (a vocabulary larger than the embedding is job/cross_checks.py's check_tokens's to name)
        try:
            largest = max_token_id(read_index(str(data["path"])))
        except (OSError, ValueError):
            return []  # a missing corpus is named by the datamodule's check
        if largest is None or largest[0] < vocabulary:
            return []
        return [
            f"datamodule.path: shard {largest[1]} of {data['path']} holds token id {largest[0]}, beyond the model's "
            f"embedding of {vocabulary} tokens (model.vocab_size or its config's): a corpus of another tokenizer, or "
            "damaged; prepare it again with the model's tokenizer"
        ]

    @classmethod
    def _prepared_tokenizer_problems(cls, run: Experiment) -> list[str]:
        """A prepared corpus (``datamodule.path``) was tokenized by the tokenizer of a Hugging Face model
        that names its directory (``model.path`` holding tokenizer.json)."""
        data, model = run.datamodule, run.model
        if not data.get("path") or not model.get("path") or not model.get("pretrained", True):
            return []
        try:
            theirs, ours = read_index(str(data["path"]))["tokenizer"], tokenizer_file(str(model["path"]))
            if not ours.is_file():
                return []
            fingerprint = tokenizer_fingerprint(ours)
        except (OSError, ValueError):
            return []  # a missing corpus or model is named by its own check
        if fingerprint == theirs["fingerprint"]:
            return []
        return [
            f"datamodule.path: the corpus at {data['path']} was prepared with {theirs['file'] or 'UTF-8 bytes'} "
            f"(fingerprint {theirs['fingerprint']}), not model.path's tokenizer {ours} ({fingerprint}); prepare it "
            f"again with tokenizer={model['path']}"
        ]

    @classmethod
    def _document_boundaries_problems(cls, run: Experiment) -> list[str]:
        """``datamodule.document_boundaries`` gives the model each token's position in its document: its
        forward must take ``positions`` (the built-in GPT's and a Hugging Face causal LM's do)."""
        import inspect

        if not run.datamodule.get("document_boundaries"):
            return []
        try:
            forward = inspect.signature(run.model.cls.forward).parameters
        except Exception:  # noqa: BLE001 - an unknown target is reported by the target check
            return []
        if "positions" in forward or any(p.kind is p.VAR_KEYWORD for p in forward.values()):
            return []
        return [
            f"datamodule.document_boundaries: the batches carry each token's position in its document, but "
            f"{run.model.name}.forward takes no 'positions'; set document_boundaries=false, or use "
            "model=gpt or hf/causal_lm (or give your model's forward a positions argument)"
        ]

    @classmethod
    def text_tokenizer(cls, path: Union[str, list, None] = None, tokenizer: Optional[str] = None, **_) -> Optional[str]:
        """The tokenizer text is encoded with (the harness's questions): ``tokenizer``, or the one the corpus
        was prepared with (None: bytes). OSError, ValueError or KeyError: a corpus that does not read."""
        return tokenizer or read_index(str(path))["tokenizer"]["file"]

    @classmethod
    def train_samples(cls, path: Union[str, list, None] = None, seq_len: int = 128, **_) -> Optional[int]:
        """The training windows of the corpus (of corpora mixed: together), known before start from the
        index (None when unknown)."""
        counts = []
        for one in path if isinstance(path, (list, tuple)) else [path]:
            index, problems = _index_or_problem(one)
            if index is None or not isinstance(seq_len, int) or seq_len < 1:
                return None
            counts.append(max(0, split_tokens(index, "train") - 1) // seq_len)
        return sum(counts)

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        for path, index in zip(self.paths, self.indexes):
            problems = PreparedCorpus(path, index).problems()
            if problems:
                raise FileNotFoundError("datamodule.path: " + "; ".join(problems))
        sources = [
            {split: self._windows(index["splits"].get(split, []), path, index) for split in SPLITS}
            for path, index in zip(self.paths, self.indexes)
        ]
        if not self.mixed:
            self.train_set, self.val_set, self.test_set = (
                sources[0][s] if len(sources[0][s]) else None for s in SPLITS
            )
            return
        trains = [source["train"] for source in sources]
        self.train_set = MixedWindows(trains, self.weights or [len(t) for t in trains])
        self.val_set, self.test_set = (_joined([source[s] for source in sources]) for s in ("val", "test"))

    def _windows(self, shards: list[dict], path: Optional[str] = None, index: Optional[dict] = None) -> TokenWindows:
        index = index or self.index
        return TokenWindows(path or self.path, shards, index["dtype"], self.seq_len, self.document_boundaries)

    def source_shares(self, seed: int, epochs: list[tuple[int, int]]) -> Optional[dict]:
        """Corpora mixed: each one's share of the samples trained on, ``epochs`` (epoch, samples) into
        the engine's order of each epoch (the mixture's ``shuffle_order`` seeded by (seed, epoch))."""
        if not self.mixed or not isinstance(self.train_set, MixedWindows):
            return None
        order = self.train_set.shuffle_order
        positions = [order(np.arange(n), len(self.train_set), [seed, e]) for e, n in epochs if n]
        shares = self.train_set.shares(np.concatenate(positions) if positions else np.zeros(0, np.int64))
        return dict(zip(source_names(self.paths), shares))

    # ---- a checkpoint's record of the corpus (Lightning's DataModule state_dict / load_state_dict) ----
    def state_dict(self) -> dict:
        """What the corpus is (its shards and their checksums, per split): a resume checks it."""
        if self.mixed:
            return {"path": list(self.paths), "identities": [identity(index) for index in self.indexes]}
        return {"path": str(self.path), "identity": identity(self.index)}

    def load_state_dict(self, state: dict) -> None:
        """Resume on the corpus a checkpoint trained on. Grown since (shards appended): the interrupted
        epoch continues over the windows it had (the train split pinned to the saved shards), the new
        ones join from the next epoch (``reload_next_epoch``). Otherwise changed: ValueError naming how."""
        if self.mixed or "identities" in state:
            return self._load_mixed(state)
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

    def _load_mixed(self, state: dict) -> None:
        """Corpora mixed resume on the very corpora they trained on (a mixture's positions are laid out
        over the sizes of all its sources: a grown one would move every position)."""
        saved = state.get("identities") or [state.get("identity") or {}]
        if len(saved) != len(self.indexes):
            raise ValueError(
                f"datamodule.path: the checkpoint trained on {len(saved)} corpora, these are {len(self.indexes)}"
            )
        for path, before, index in zip(self.paths, saved, self.indexes):
            for split in SPLITS:
                change = corpus_change(before, identity(index), split)
                if change is not None:
                    raise ValueError(
                        f"datamodule.path: the corpus at {path} changed since the checkpoint was taken: "
                        f"{'shards were appended' if change == 'grown' else change}; corpora mixed resume on "
                        "the corpora they trained on"
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

    def predict_dataloader(self):
        """``predict_prompts`` to continue; without them, the test windows' ends."""
        if self.predict_prompts is not None:
            self.predict_set = self.predict_set or prompt_set(self.codec, self.predict_prompts)
        return super().predict_dataloader()

    def __repr__(self) -> str:
        return f"TokensDataModule({Path(self.path)}, seq_len={self.seq_len})"
