"""What both Hugging Face wrappers share (a mixin beside ``nn.Module``): their checks before start,
the sizes they declare for the checks against the data, and the export back to the library's form."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from framework.models import hf_export, hf_files


class HFSource:
    """Needs ``hf_config``, ``path`` and ``hf_weights(state dict) -> {library name: tensor}``;
    ``GROUP``: the model option, for messages."""

    GROUP = "hf"

    @classmethod
    def check_config(cls, path: Optional[str] = None, config: Optional[dict] = None, **_) -> list[str]:
        return hf_files.config_problems(path, config, cls.GROUP)

    @classmethod
    def declared_sizes(cls, path: Optional[str] = None, config: Optional[dict] = None, **_) -> dict:
        """vocab_size and max_seq_len, for the checks against the data before start."""
        c = hf_files.load_config(path, config)
        return {"vocab_size": c.vocab_size, "max_seq_len": c.max_position_embeddings}

    def save_hf(self, directory: Path, weights: dict[str, torch.Tensor]) -> None:
        """``weights`` (this model's full state dict) as a directory ``from_pretrained`` loads."""
        source = hf_files.resolve_path(self.path) if self.path else None
        hf_export.write_directory(directory, self.hf_config, self.hf_weights(weights), source)
