"""A run's model as EleutherAI's lm-evaluation-harness sees a language model (``lm_eval``'s
``TemplateLM``): the log-likelihood of continuations, rolling log-likelihoods and generation until a
stop sequence, with the datamodule's tokenizer, as its own Hugging Face loader (``HFLM``) computes them.

The harness runs whole on every rank, as one process would (the same requests, in the same order,
everywhere); this model splits each list of requests across the data-parallel ranks, runs its share
in batches (as many on every rank where forwards go in lockstep) and gathers every answer to every
rank. So a score does not depend on the layout, and only rank 0's is written.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from lm_eval import utils
from lm_eval.api.model import TemplateLM

from framework.strategies.comm.collectives import all_gather_object, is_distributed
from framework.tasks.generation import Sampling, generate, max_positions

DEFAULT_LENGTH = 2048  # HFLM's, for a model that does not say how many positions it holds
DEFAULT_GEN_TOKS = 256  # HFLM's max_gen_toks


def encode(codec, string: str, add_special_tokens: bool | None = None) -> list[int]:
    """``string``'s token ids as the harness's model encodes them (bytes without a tokenizer)."""
    if codec.tokenizer is None:
        return list(string.encode("utf-8"))
    return codec.tokenizer.encode(string, add_special_tokens=add_special_tokens is not False).ids


def continuation_ids(codec, context: str, continuation: str) -> list[int]:
    """The token ids a log-likelihood request scores, paired with its context as lm-eval's TemplateLM
    pairs them (a context's trailing spaces go to the continuation; the whole text encoded, then split)."""
    if not context:
        return encode(codec, continuation)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    return encode(codec, context + continuation)[len(encode(codec, context)) :]


class RankShares:
    """Runs ``work`` over a list of items that every rank holds alike, each data-parallel rank its share."""

    def __init__(self, strategy):
        t = strategy.topology
        self.world = strategy.world_size if is_distributed() else 1
        self.size, self.index = t.data_parallel_size, t.data_parallel_rank(strategy.rank)
        self.lockstep = strategy.lockstep_forward and self.world > 1
        # the first rank of each data-parallel share (a tensor- or context-parallel group's answers are alike)
        self.first = [next(r for r in range(self.world) if t.data_parallel_rank(r) == d) for d in range(self.size)]

    def run(self, items: Sequence, batch_size: int, work: Callable[[list], list]) -> list:
        """``work(batch) -> answers`` over every item, the answers in the items' order on every rank."""
        mine = list(items[self.index :: self.size])
        for start in range(0, math.ceil(math.ceil(len(items) / self.size) / batch_size) * batch_size, batch_size):
            batch = mine[start : start + batch_size]
            if batch:
                mine[start : start + batch_size] = work(batch)
            elif self.lockstep:
                work(list(items[:1]))  # the forwards the other ranks run; the answer is discarded
        if self.world == 1:
            return mine
        gathered = all_gather_object(mine)
        parts = [gathered[r] for r in self.first]
        return [parts[i % self.size][i // self.size] for i in range(len(items))]


class FrameworkLM(TemplateLM):
    """``model``: what to call (``Trainer.inference``), ``codec``: the datamodule's tokenizer
    (framework/data/text.py), ``eos``: the ids generation stops at, ``batch_size``: requests per forward,
    ``autocast``: the run's precision context."""

    def __init__(
        self,
        model: torch.nn.Module,
        strategy,
        codec,
        eos: Sequence[int],
        batch_size: int,
        seed: int = 0,
        autocast: Callable = contextlib.nullcontext,
    ):
        super().__init__()
        self.model, self.codec, self.batch_size, self.seed = model, codec, batch_size, seed
        self.autocast = autocast
        self.shares, self.multiple, self._device = RankShares(strategy), strategy.sequence_multiple, strategy.device
        special = codec.special
        self.eos = list(eos)
        named_eos = special["tokenizer_eos"]
        self._eot = named_eos if named_eos is not None else next(iter(self.eos), codec.pad)
        self._prefix = special["tokenizer_bos"] if special["tokenizer_bos"] is not None else self._eot
        self.max_length = max_positions(model) or DEFAULT_LENGTH

    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        return self._prefix

    @property
    def device(self):
        return self._device

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return encode(self.codec, string, add_special_tokens)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.codec.decode(tokens)

    # ---- log-likelihoods ----
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        pairs = [(context, continuation) for _, context, continuation in requests]
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))  # similar lengths
        answers = self.shares.run([pairs[i] for i in order], self.batch_size, self._score)
        out = [None] * len(pairs)
        for place, answer in zip(order, answers):
            out[place] = answer
        return out

    def _score(self, batch: list) -> list[tuple[float, bool]]:
        """(log-likelihood, whether greedy decoding gives it) of each continuation after its context."""
        inputs = [(context + continuation)[-(self.max_length + 1) :][:-1] for context, continuation in batch]
        width = max(len(i) for i in inputs)
        width += -width % self.multiple  # (padding on the right: no token before it attends to it)
        tokens = torch.tensor([i + [self.codec.pad] * (width - len(i)) for i in inputs], device=self._device)
        with self.autocast():
            logprobs = F.log_softmax(self.model(tokens).float(), dim=-1)
        out = []
        for row, given, (_, continuation) in zip(logprobs, inputs, batch):
            scored = row[len(given) - len(continuation) : len(given)]
            target = torch.tensor(continuation, device=scored.device)
            value = scored.gather(-1, target[:, None]).sum()
            out.append((float(value), bool((scored.argmax(dim=-1) == target).all())))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text's log-likelihood, scored in disjoint windows of the model's length (as HFLM does)."""
        windows, owner = [], []
        for i, (text,) in enumerate(req.args for req in requests):
            for context, continuation in map(
                utils.make_disjoint_window,
                utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((None, context, continuation))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (value, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[i] += value
        return totals

    # ---- generation ----
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each context's greedy (or sampled) continuation, cut at the first of its stop sequences."""
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(json.dumps(req.args[1], sort_keys=True, default=str), []).append(i)
        out = [""] * len(requests)
        for key, members in groups.items():
            settings = json.loads(key)
            contexts = [requests[i].args[0] for i in members]
            for i, text in zip(members, self._generate_group(contexts, settings)):
                out[i] = text
        return out

    def _generate_group(self, contexts: list[str], settings: dict) -> list[str]:
        until = settings.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        until.append(self.tok_decode([self.eot_token_id]))
        new = int(settings.get("max_gen_toks", DEFAULT_GEN_TOKS))
        sampled = bool(settings.get("do_sample")) and float(settings.get("temperature") or 0) > 0
        sampling = Sampling(
            new,
            temperature=float(settings.get("temperature") or 0) if sampled else 0.0,
            top_k=int(settings.get("top_k") or 0),
            top_p=float(settings.get("top_p") or 1.0),
            seed=self.seed,
        )
        keep = max(self.max_length - new, 1)
        encoded = [(i, self.tok_encode(c)[-keep:] or [self.prefix_token_id]) for i, c in enumerate(contexts)]

        def work(batch: list) -> list[str]:
            longest = max(len(e) for _, e in batch)
            ids = [[self.codec.pad] * (longest - len(e)) + e for _, e in batch]
            mask = [[False] * (longest - len(e)) + [True] * len(e) for _, e in batch]
            rows = torch.tensor([i for i, _ in batch])
            with self.autocast():
                generated = generate(
                    self.model,
                    torch.tensor(ids, device=self._device),
                    torch.tensor(mask, device=self._device),
                    sampling,
                    eos=self.eos,
                    pad=self.codec.pad,
                    rows=rows,
                )
            return [_cut(self.tok_decode(self.codec.continuation(row)), until) for row in generated.tolist()]

        return self.shares.run(encoded, self.batch_size, work)


def _cut(text: str, until: list[str]) -> str:
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text
