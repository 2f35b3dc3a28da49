"""Language modelling: next-token cross-entropy, token accuracy and perplexity; continuations of
prompts for the predict loop."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch.nn import functional as F

from framework.config.ranges import Range
from framework.tasks.metrics import EpochMetrics


class Perplexity:
    """exp(the mean cross-entropy of every counted token of a pass), over every rank's tokens: an
    epoch metric (update with logits and targets; compute sums over ranks). torchmetrics' own takes
    seconds to import in every rank; this is the same quantity in a few lines."""

    def __init__(self, ignore_index: int = -100):
        self.ignore_index = ignore_index
        self.reset()

    def reset(self) -> None:
        self.state = torch.zeros(2, dtype=torch.float64)  # (summed negative log-likelihood, tokens)

    def to(self, device) -> "Perplexity":
        self.state = self.state.to(device)
        return self

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        nll = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=self.ignore_index, reduction="sum"
        )
        counted = (targets != self.ignore_index).sum()
        self.state = self.state.to(nll.device) + torch.stack([nll.double(), counted.double()])

    def compute(self) -> torch.Tensor:
        import torch.distributed as dist

        total = self.state.clone()
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(total)
        return torch.exp(total[0] / total[1].clamp(min=1))


def _aux_loss(model: torch.nn.Module) -> Optional[torch.Tensor]:
    """The auxiliary loss the model's last forward left (``aux_loss``: a mixture of experts'), if any."""
    while hasattr(model, "module"):  # DDP's, DataParallel's
        model = model.module
    aux = getattr(model, "aux_loss", None)
    return aux if isinstance(aux, torch.Tensor) else None


class LanguageModelingTask:
    """``step(model, (tokens, targets[, positions]), stage)``: the mean cross-entropy of every target token
    (``ignore_index`` ones left out) and ``acc``, the share of tokens predicted exactly. Perplexity
    (``ppl``, exp of the mean loss over the whole pass, over every rank's tokens) is an epoch metric
    beside ``metrics``. ``predict_step`` continues each prompt by
    ``max_new_tokens`` tokens: greedy with ``temperature: 0``, else sampled (``top_k``, ``seed``), each
    from a window of the model's ``max_seq_len`` tokens (left-padded with ``pad_token``, a space)."""

    argument_ranges = {"max_new_tokens": Range(low=0), "temperature": Range(low=0), "top_k": Range(low=0)}

    def __init__(
        self,
        ignore_index: int = -100,
        train_metrics: bool = False,
        metrics: Optional[Mapping[str, Any]] = None,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        seed: int = 0,
        pad_token: int = 32,
    ):
        self.ignore_index, self.train_metrics, self.pad_token = ignore_index, train_metrics, pad_token
        self.max_new_tokens, self.temperature, self.top_k, self.seed = max_new_tokens, temperature, top_k, seed
        stages = ("train", "val", "test") if train_metrics else ("val", "test")
        self.epoch_metrics = EpochMetrics({"ppl": Perplexity(ignore_index), **(metrics or {})}, stages)

    def step(self, model: torch.nn.Module, batch, stage: str):
        tokens, targets, *positions = batch  # positions: datamodule.document_boundaries
        logits = model(tokens, positions=positions[0]) if positions else model(tokens)
        loss = self.loss(logits, targets)
        if self.epoch_metrics.tracks(stage):
            self.epoch_metrics.update(stage, logits.detach().float(), targets)
        aux = _aux_loss(model) if stage == "train" else None
        if aux is not None:  # a mixture of experts' load-balancing loss: trained on, logged apart
            loss = loss + aux
        if stage == "train" and not self.train_metrics:
            return loss, {} if aux is None else {"aux_loss": aux.detach()}
        counted = targets != self.ignore_index
        acc = ((logits.argmax(dim=-1) == targets) & counted).sum() / counted.sum().clamp(min=1)
        return loss, {"acc": acc.float(), **({} if aux is None else {"aux_loss": aux.detach()})}

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean next-token cross-entropy (the mixture of experts' auxiliary loss is ``step``'s)."""
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=self.ignore_index)

    @torch.no_grad()
    def predict_step(self, model: torch.nn.Module, batch) -> dict[str, torch.Tensor]:
        """``tokens``: each prompt followed by its ``max_new_tokens`` generated tokens."""
        tokens = batch[0] if isinstance(batch, (list, tuple)) else batch
        generator = torch.Generator(device=tokens.device).manual_seed(self.seed)
        inner = model
        while hasattr(inner, "module"):  # DDP's, DataParallel's
            inner = inner.module
        size = inner.config.get("max_seq_len") if isinstance(getattr(inner, "config", None), dict) else None
        for _ in range(self.max_new_tokens):
            logits = model(self._window(tokens, size))[:, -1, :].float()
            tokens = torch.cat([tokens, self._next(logits, generator)], dim=1)
        return {"tokens": tokens}

    def _window(self, tokens: torch.Tensor, size: Optional[int]) -> torch.Tensor:
        """The last ``size`` tokens, left-padded with ``pad_token`` to exactly ``size``: every forward
        has the model's own length (which sequence parallelism splits evenly)."""
        if size is None:
            return tokens
        if tokens.shape[1] >= size:
            return tokens[:, -size:]
        pad = torch.full(
            (tokens.shape[0], size - tokens.shape[1]), self.pad_token, dtype=tokens.dtype, device=tokens.device
        )
        return torch.cat([pad, tokens], dim=1)

    def _next(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = logits / self.temperature
        if self.top_k:
            kth = logits.topk(min(self.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
