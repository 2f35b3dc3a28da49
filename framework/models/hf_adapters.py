"""An adapted Hugging Face model's export: its adapters in peft's own format (``adapter_config.json``,
``adapter_model.safetensors`` under peft's names), which ``PeftModel.from_pretrained`` loads on the
base; or, merged (``export_merge=true``), the whole model as ``from_pretrained`` loads it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from framework.config.schemas import AdapterConfig
from framework.models.hf_export import fresh_folder, replace_export

# peft's names of our adapter tensors
PEFT_NAMES = {"lora_a": "lora_A.weight", "lora_b": "lora_B.weight", "lora_magnitude": "lora_magnitude_vector"}


def peft_tensors(weights: dict[str, torch.Tensor], hf_name) -> dict[str, torch.Tensor]:
    """The adapter tensors of a full state dict under peft's names (``hf_name``: our parameter name ->
    the library's)."""
    out = {}
    for key, tensor in weights.items():
        module, _, leaf = key.rpartition(".")
        if leaf in PEFT_NAMES:
            library = hf_name(f"{module}.weight")[: -len(".weight")]
            out[f"base_model.model.{library}.{PEFT_NAMES[leaf]}"] = tensor.detach().contiguous().clone()
    return out


def peft_config(settings: AdapterConfig, weights: dict, base: Optional[Path]):
    """peft's LoraConfig of these adapters (the leaf names of the layers they adapt)."""
    from peft import LoraConfig

    adapted = sorted({k.rpartition(".")[0].rpartition(".")[2] for k in weights if k.endswith(".lora_a")})
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=adapted,
        use_dora=settings.use_dora,
        bias="none",
        task_type="CAUSAL_LM",
        base_model_name_or_path=str(base) if base is not None else None,
    )


def write_adapters(directory: Path, model, weights: dict[str, torch.Tensor], source: Optional[Path]) -> None:
    """``directory`` as peft's ``save_pretrained`` writes it (and the source's tokenizer files), written
    beside it first (hf_export.replace_export); a file of the user's there is kept."""
    from safetensors.torch import save_file

    tmp = fresh_folder(directory)
    peft_config(model.adapter_settings, weights, source).save_pretrained(str(tmp))
    save_file(peft_tensors(weights, model.hf_name), str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
    replace_export(tmp, directory, source)
