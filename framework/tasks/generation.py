"""Generation as ``transformers``' ``generate`` does it: a batch of prompts padded on the left to
its longest, an attention mask, a key/value cache, each row stopped at an end-of-sequence token or
after ``max_new_tokens``; greedy, or sampled with temperature, top-k and top-p.

A model takes part with a cache when its ``forward`` has a ``cache`` argument (the built-in GPT and
a Hugging Face causal LM do, framework/models/kv_cache.py): the prompt runs once, then one token per
forward. A model without one runs the whole sequence at every step (rows shorter than the batch's
longest prompt then see its padding: predict with ``datamodule.batch_size=1`` for exact results).

The layout (``decoding_layout``, set by the engine's predict loop) says whether every rank must
run each forward together (sharded weights are gathered inside forward: the ranks stop together,
when every rank's rows are done) and whether a forward's length must be a multiple of some
degree (sequence parallelism splits it: fillers that hold no token make it one).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from framework.models.kv_cache import DecodingCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sampling:
    """How each next token is chosen: greedy with ``temperature`` 0, else drawn from the softmax of
    the logits / temperature, kept to the ``top_k`` most likely (0: all) and to the smallest set
    whose probability reaches ``top_p`` (1: all), from a generator per row seeded by (``seed``, the
    row's index in the dataset): the same draws whatever the batch and the world size."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class DecodingLayout:
    synced: bool = False  # every rank runs each forward together (weights gathered inside forward)
    multiple: int = 1  # each forward's length a multiple of it (sequence parallelism's degree)


_LAYOUT: contextvars.ContextVar[Optional[DecodingLayout]] = contextvars.ContextVar("decoding_layout", default=None)


@contextlib.contextmanager
def decoding_layout(layout: DecodingLayout):
    """Within it, ``generate`` runs its forwards as ``layout`` says (the engine's predict loop sets it)."""
    token = _LAYOUT.set(layout)
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def takes_cache(model: torch.nn.Module) -> bool:
    """Whether ``model`` (inside its wrappers) runs a forward with generation's ``cache``."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):  # DDP's, a pipeline's
        inner = inner.module
    inner = getattr(inner, "_orig_mod", inner)  # torch.compile's
    return "cache" in inspect.signature(inner.forward).parameters


def plain_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DDP's wrapper, for forwards without gradients: DDP prepares a backward and syncs
    buffers in its forward, a collective the other ranks may not run then (FSDP2 and tensor parallelism
    wrap in place: their model is the module itself, whose forwards gather what they need)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def max_positions(model: torch.nn.Module) -> Optional[int]:
    """The positions the model holds (its ``config['max_seq_len']``), or None when it does not say."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):
        inner = inner.module
    config = getattr(getattr(inner, "_orig_mod", inner), "config", None)
    return config.get("max_seq_len") if isinstance(config, dict) else None


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    tokens: torch.Tensor,
    attention_mask: Optional[torch.Tensor] = None,
    sampling: Sampling = Sampling(),
    eos: Sequence[int] = (),
    pad: int = 0,
    rows: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The tokens generated after each prompt, [batch, max_new_tokens], ``pad`` after a row's end
    of sequence (which is kept). ``tokens`` [batch, length]: prompts padded on the left;
    ``attention_mask`` (True where a token is; None: no padding); ``rows``: each row's index in
    the dataset (the seed of its draws; None: its place in the batch)."""
    valid = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    tokens, valid = _fit(tokens, valid, sampling.max_new_tokens, max_positions(model))
    layout = _LAYOUT.get() or DecodingLayout()
    rows = torch.arange(len(tokens)) if rows is None else rows
    choose = _Chooser(sampling, rows.tolist(), tokens.device)
    eos_ids = torch.tensor(list(eos), dtype=tokens.dtype, device=tokens.device)
    done = torch.zeros(len(tokens), dtype=torch.bool, device=tokens.device)
    out = torch.full((len(tokens), sampling.max_new_tokens), pad, dtype=tokens.dtype, device=tokens.device)
    cached = takes_cache(model)
    step = _CachedSteps(model, tokens, valid, layout.multiple, pad) if cached else _WholeSteps(model, tokens)
    for i in range(sampling.max_new_tokens):
        if _all_done(done, layout.synced):
            break
        chosen = choose(step.logits())
        chosen = torch.where(done, torch.full_like(chosen, pad), chosen)
        out[:, i] = chosen
        done |= torch.isin(chosen, eos_ids)
        step.append(chosen)
    return out


def _all_done(done: torch.Tensor, synced: bool) -> bool:
    """Every row is done: this rank's, or with ``synced`` every rank's (each runs as many forwards)."""
    left = done.logical_not().any().to(torch.int32)
    if synced:
        import torch.distributed as dist

        dist.all_reduce(left, op=dist.ReduceOp.MAX)
    return not bool(left)


def _fit(tokens: torch.Tensor, valid: torch.Tensor, new: int, positions: Optional[int]):
    """The prompts without the padding columns every row has, and cut on the left to leave room for
    ``new`` tokens within the model's ``positions``."""
    first = int(valid.any(dim=0).long().argmax()) if bool(valid.any()) else 0
    tokens, valid = tokens[:, first:], valid[:, first:]
    if positions is not None and new >= positions:  # (refused before start for a configured run)
        raise ValueError(f"task.max_new_tokens: {new} new tokens, but the model holds {positions} positions")
    if positions is not None and tokens.shape[1] + new > positions:
        keep = positions - new
        log.warning(
            "Generation: prompts of %d tokens and %d new ones exceed the model's %d positions; each prompt "
            "keeps its last %d tokens",
            tokens.shape[1],
            new,
            positions,
            keep,
        )
        tokens, valid = tokens[:, -keep:], valid[:, -keep:]
    return tokens, valid


class _CachedSteps:
    """The prompt in one forward, then one token per forward, over generation's cache."""

    def __init__(self, model, tokens: torch.Tensor, valid: torch.Tensor, multiple: int, pad: int):
        self.model, self.multiple, self.pad, self.cache = model, multiple, pad, DecodingCache()
        fill = -tokens.shape[1] % multiple  # on the left: the prompt's last token stays last
        self.chunk = torch.cat([torch.full_like(tokens[:, :fill], pad), tokens], dim=1)
        self.valid = torch.cat([torch.zeros_like(valid[:, :fill]), valid], dim=1)
        self.last = self.chunk.shape[1] - 1  # where the logits of the next token are

    def logits(self) -> torch.Tensor:
        self.cache.extend(self.valid)
        self.cache.logits_at = self.last
        logits = self.model(self.chunk, cache=self.cache)
        # (a model that computes the read position's logits alone returns one position)
        return logits[:, self.last if logits.shape[1] == self.chunk.shape[1] else 0].float()

    def append(self, chosen: torch.Tensor) -> None:
        # the new token first, then fillers that hold none (a forward of ``multiple`` positions)
        self.chunk = torch.cat([chosen[:, None], torch.full_like(self.chunk[:, : self.multiple - 1], self.pad)], 1)
        self.valid = torch.zeros_like(self.chunk, dtype=torch.bool)
        self.valid[:, 0] = True
        self.last = 0


class _WholeSteps:
    """A model without a cache: the whole sequence at every step."""

    def __init__(self, model, tokens: torch.Tensor):
        self.model, self.tokens = model, tokens

    def logits(self) -> torch.Tensor:
        return self.model(self.tokens)[:, -1].float()

    def append(self, chosen: torch.Tensor) -> None:
        self.tokens = torch.cat([self.tokens, chosen[:, None]], dim=1)


class _Chooser:
    """The next token of each row from its logits [batch, vocab], as ``Sampling`` says."""

    def __init__(self, sampling: Sampling, rows: list[int], device: torch.device):
        self.sampling = sampling
        self.generators = [
            torch.Generator(device=device).manual_seed((sampling.seed * 1_000_003 + row) % 2**63) for row in rows
        ]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.sampling
        if s.temperature == 0:
            return logits.argmax(dim=-1)
        logits = logits / s.temperature
        if s.top_k:
            kth = logits.topk(min(s.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if s.top_p < 1:
            logits = _top_p(logits, s.top_p)
        probs = torch.softmax(logits, dim=-1)
        return torch.cat([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, self.generators)])


def _top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The smallest set of most likely tokens whose probability reaches ``top_p`` (at least one), as
    transformers' TopPLogitsWarper keeps."""
    ordered, order = logits.sort(dim=-1, descending=False)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - top_p
    drop[:, -1] = False
    return logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
