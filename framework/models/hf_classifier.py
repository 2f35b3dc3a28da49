"""A Hugging Face encoder (BERT, MiniLM, RoBERTa, ...) with a classification head:
``AutoModelForSequenceClassification`` from a saved model directory (transfer learning: the
encoder's weights, a new head of ``num_labels``), or from its config alone (the same
architecture from scratch). Built whole on every rank (from the seeded generator: the same
weights everywhere); data parallelism, FSDP (its ``_no_split_modules``) and DeepSpeed shard it.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from framework.config.ranges import Range
from framework.models import hf_files
from framework.models.hf_source import HFSource


class HFSequenceClassifier(HFSource, nn.Module):
    """``forward(tokens [batch, seq]) -> logits [batch, num_labels]``; the padding (the model's
    ``pad_token_id``) is masked out of attention. ``pretrained=false``: the saved model's
    architecture with freshly drawn weights."""

    inputs, outputs = "token ids", "logits per sample"

    argument_ranges = {"num_labels": Range(low=2)}
    PREFIX = "model."
    GROUP = "hf/sequence_classification"

    def __init__(
        self, num_labels: int, path: Optional[str] = None, config: Optional[dict] = None, pretrained: bool = True
    ):
        super().__init__()
        library = hf_files.transformers()
        self.hf_config = hf_files.load_config(path, {**(config or {}), "num_labels": num_labels})
        auto = library.AutoModelForSequenceClassification
        if path and pretrained:
            self.model = auto.from_pretrained(
                str(hf_files.model_directory(path)),
                config=self.hf_config,
                local_files_only=True,
                dtype=torch.float32,
                use_safetensors=True,
            )
        else:
            self.model = auto.from_config(self.hf_config, dtype=torch.float32)
        self.path, self.architecture = path, type(self.model).__name__
        self.pad_id = self.hf_config.pad_token_id if self.hf_config.pad_token_id is not None else 0
        self.fsdp_wrap_classes = list(getattr(self.model, "_no_split_modules", None) or [])
        self.config = dict(vocab_size=self.hf_config.vocab_size, max_seq_len=self.hf_config.max_position_embeddings)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, attention_mask=(tokens != self.pad_id).long()).logits

    def hf_weights(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k[len(self.PREFIX) :]: v for k, v in weights.items() if k.startswith(self.PREFIX)}
