"""What both Hugging Face wrappers share (a mixin beside ``nn.Module``): their checks before start,
the sizes they declare for the checks against the data, and the export back to the library's form."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from framework.models import hf_export, hf_files
from framework.models.lora import is_adapter


class HFSource:
    """Needs ``hf_config``, ``path``, ``architecture`` (the library's class of the whole model) and
    ``hf_weights(state dict) -> {library name: tensor}``; ``GROUP``: the model option, for messages."""

    GROUP = "hf"

    @classmethod
    def check_config(cls, path: Optional[str] = None, config: Optional[dict] = None, **_) -> list[str]:
        """Before start: the library is there, and exactly one source of the model's shape names a
        model ``transformers`` knows."""
        if not hf_files.has_transformers():
            return [hf_files.MISSING_LIBRARY.format(group=cls.GROUP)]
        if not path and not (config or {}).get("model_type"):
            return [
                "path: null, and config names no model_type: give model.path=<a saved model directory> or "
                "model.config={model_type: llama, ...} for a model built from scratch"
            ]
        found = hf_files.WeightReader.problems(path) if path else []
        if found:
            return found
        try:
            hf_files.load_config(path, config)
        except (ValueError, KeyError, TypeError, OSError) as err:
            return [f"config: {str(err).splitlines()[0]}"]
        return []

    @classmethod
    def model_source(cls, path: Optional[str] = None, pretrained: bool = True, **_) -> Optional[dict]:
        """The saved model the weights start from (results.json's ``model_source``); None: drawn afresh."""
        return hf_files.source_record(path) if path and pretrained else None

    @classmethod
    def declared_sizes(cls, path: Optional[str] = None, config: Optional[dict] = None, **_) -> dict:
        """vocab_size and max_seq_len, for the checks against the data before start."""
        c = hf_files.load_config(path, config)
        return {"vocab_size": c.vocab_size, "max_seq_len": c.max_position_embeddings}

    def save_hf(self, directory: Path, weights: dict[str, torch.Tensor], labels: Optional[list] = None) -> None:
        """``weights`` (this model's full state dict) as a directory ``from_pretrained`` loads: its config
        names the library's class that holds them (``architectures``) and, for a classifier, the
        data's class names (``labels``, in id order: ``id2label``, ``label2id``). Weights with adapters:
        the adapters alone, as peft saves them (merge them first for the whole model)."""
        import copy

        source = hf_files.model_directory(self.path) if self.path else None
        if any(is_adapter(k) for k in weights):  # an adapted model's: its adapters, in peft's format
            from framework.models.hf_adapters import write_adapters

            return write_adapters(directory, self, weights, source)
        config = copy.deepcopy(self.hf_config)
        config.architectures = [self.architecture]
        if labels:
            config.id2label = {i: str(name) for i, name in enumerate(labels)}
            config.label2id = {str(name): i for i, name in enumerate(labels)}
        hf_export.write_directory(directory, config, self.hf_weights(weights), source)
