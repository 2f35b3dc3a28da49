"""Language modelling: next-token cross-entropy, token accuracy and perplexity; continuations of
prompts for the predict loop."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

import torch
from torch.nn import functional as F

from framework.config.experiment import Experiment
from framework.config.ranges import Range, are_ints
from framework.tasks.generation import Sampling, generate
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


def room_to_generate(run: Experiment) -> list[str]:
    """A prediction generates ``max_new_tokens`` after at least one prompt token, within the positions
    the model holds (``model.max_seq_len``, or what the model declares: a Hugging Face model's config's
    ``max_position_embeddings``; generation cuts a longer prompt on the left, not the new tokens)."""
    new = run.task.get("max_new_tokens")
    if not run.predict or not are_ints(new):
        return []
    positions = run.model.sizes().get("max_seq_len")  # (the node's, else the class's declared_sizes)
    if not are_ints(positions) or new < positions:
        return []
    key = "model.max_seq_len" if "max_seq_len" in run.model else "its config's max_position_embeddings"
    other = ", or predict=false" if run.train or run.test else ""
    return [
        f"task.max_new_tokens: {new} new tokens, but the model holds {positions} positions ({key}) "
        f"and a prompt needs one of them; set task.max_new_tokens={positions - 1} or less{other}"
    ]


def token_id_problems(run: Experiment) -> list[str]:
    """``task.eos_token_id`` and ``task.pad_token``: ids of the vocabulary (``datamodule.vocab_size``, else the
    model's), as generation compares and writes them (an id outside it never ends a row, or is no token)."""
    vocabulary = run.datamodule.get("vocab_size")
    vocabulary = vocabulary if are_ints(vocabulary) else run.model.sizes().get("vocab_size")
    problems = []
    for key in ("eos_token_id", "pad_token"):
        value = run.task.get(key)
        ids = value if isinstance(value, list) else [value]
        wrong = [i for i in ids if are_ints(i) and (i < 0 or (are_ints(vocabulary) and i >= vocabulary))]
        if wrong:
            within = f" (0 to {vocabulary - 1})" if are_ints(vocabulary) else " (a token id is >= 0)"
            problems.append(
                f"task.{key}: {', '.join(map(str, wrong))} is no token of the vocabulary{within}; null: the tokenizer's"
            )
    return problems


class LanguageModelingTask:
    """``step(model, (tokens, targets[, positions]), stage)``: the mean cross-entropy of every target token
    (``ignore_index`` ones left out) and ``acc``, the share of tokens predicted exactly. Perplexity
    (``ppl``, exp of the mean loss over the whole pass, over every rank's tokens) is an epoch metric
    beside ``metrics``. ``predict_step`` continues each prompt by up to ``max_new_tokens`` tokens
    (framework/tasks/generation.py): greedy with ``temperature: 0``, else sampled (``top_k``,
    ``top_p``, ``seed``); a row stops at an end-of-sequence token, ``eos_token_id`` or the
    datamodule's tokenizer's (``connect``), padded after it with ``pad_token`` (null: the tokenizer's)."""

    targets, model_outputs = "next tokens", "logits per token"  # what the checks before start match

    argument_ranges = {
        "max_new_tokens": Range(low=0),
        "temperature": Range(low=0),
        "top_k": Range(low=0),
        "top_p": Range(low=0, high=1, strict=True),
    }

    @classmethod
    def check_run(cls, run: Experiment) -> list[str]:
        """Before start: windows of tokens from the data (a datamodule with a vocabulary) and logits
        per token from the model (one with a vocabulary, or that declares its sizes)."""
        data, model, key = run.datamodule, run.model, f"task._target_: {run.task.target}"
        problems = []
        if "vocab_size" not in data:
            problems.append(
                f"{key} trains on windows of tokens, but datamodule {data.name} has no vocabulary (no vocab_size); "
                "choose datamodule=text (or a datamodule of tokens of your own)"
            )
        if data.declared("targets") == "preference pairs":
            problems.append(
                f"{key} trains on windows of tokens, but datamodule {data.name} gives preference pairs (a chosen "
                "and a rejected answer to each prompt); choose task=dpo"
            )
        if "vocab_size" not in model and not callable(model.declared("declared_sizes")):
            problems.append(
                f"{key} needs logits per token, but model {model.name} has no vocabulary (no vocab_size); "
                "choose model=gpt (or a language model of your own)"
            )
        return problems + room_to_generate(run) + token_id_problems(run)

    def __init__(
        self,
        ignore_index: int = -100,
        train_metrics: bool = False,
        metrics: Optional[Mapping[str, Any]] = None,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_token: Optional[int] = None,
        eos_token_id: Union[int, Sequence[int], None] = None,
    ):
        self.ignore_index, self.train_metrics = ignore_index, train_metrics
        self.sampling = Sampling(max_new_tokens, temperature, top_k, top_p, seed)
        self.pad_token = pad_token
        self.eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
        stages = ("train", "val", "test") if train_metrics else ("val", "test")
        self.epoch_metrics = EpochMetrics({"ppl": Perplexity(ignore_index), **(metrics or {})}, stages)

    def connect(self, datamodule) -> None:
        """The datamodule's tokenizer's end of sequence and pad ids, where the config names none."""
        special = getattr(datamodule, "special_tokens", None) or {}
        self.eos = self.eos or list(special.get("eos") or [])
        if self.pad_token is None:
            self.pad_token = special.get("pad")

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
        """The mean next-token cross-entropy over the counted targets (the mixture of experts' auxiliary
        loss is ``step``'s); 0, with no gradient, where every target is ``ignore_index`` (bit for bit
        ``cross_entropy``'s mean otherwise, which is NaN there)."""
        summed = F.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=self.ignore_index, reduction="sum"
        )
        return summed / self.counted(targets).clamp(min=1)

    def counted(self, targets: torch.Tensor) -> torch.Tensor:
        """The targets the loss averages over: those not ``ignore_index``."""
        return (targets != self.ignore_index).sum()

    @torch.no_grad()
    def predict_step(self, model: torch.nn.Module, batch) -> dict[str, torch.Tensor]:
        """``generated``: the tokens after each prompt, [batch, max_new_tokens] (``pad_token`` after an
        end of sequence). ``batch``: prompts (``input_ids``, ``attention_mask``, ``index``), or windows
        of tokens (inputs, targets[, positions]) continued from their end."""
        if isinstance(batch, Mapping):
            tokens, mask, rows = batch["input_ids"], batch.get("attention_mask"), batch.get("index")
        else:
            tokens, mask, rows = (batch[0] if isinstance(batch, (list, tuple)) else batch), None, None
        pad = self.pad_token if self.pad_token is not None else next(iter(self.eos), 0)
        generated = generate(model, tokens, mask, self.sampling, eos=self.eos, pad=pad, rows=rows)
        return {"generated": generated}
