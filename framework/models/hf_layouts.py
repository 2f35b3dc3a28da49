"""Where a Hugging Face decoder keeps its parts: the two layouts ``model=hf/causal_lm`` unpacks.

- Llama's (Llama, Qwen2, Mistral and the families that copy it): ``embed_tokens``, ``layers``,
  ``norm`` and rotary positions (``rotary_emb``) that every layer is handed;
- GPT-2's: ``wte`` and learned positions ``wpe`` added to it, dropout, blocks in ``h``, ``ln_f``.

The wrapper names the parts alike (``embed_tokens``, ``embed_positions``, ``embed_dropout``,
``layers``, ``norm``, ``lm_head``); ``hf_name`` maps a parameter's name back to the library's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import nn


@dataclass(frozen=True)
class Layout:
    name: str
    parts: dict  # our name -> the base model's attribute
    rotary: Optional[str] = None  # the base model's rotary-table module (None: learned positions)


LLAMA = Layout("Llama", {"embed_tokens": "embed_tokens", "layers": "layers", "norm": "norm"}, rotary="rotary_emb")
GPT2 = Layout(
    "GPT-2", {"embed_tokens": "wte", "embed_positions": "wpe", "embed_dropout": "drop", "layers": "h", "norm": "ln_f"}
)
LAYOUTS = (LLAMA, GPT2)


def layout_of(hf_model) -> tuple[nn.Module, Layout]:
    """The base model inside a ``*ForCausalLM`` and its layout; ValueError naming the family."""
    base = getattr(hf_model, hf_model.base_model_prefix, None)
    for layout in LAYOUTS:
        wanted = [*layout.parts.values(), *([layout.rotary] if layout.rotary else [])]
        if all(hasattr(base, attr) for attr in wanted) and hasattr(hf_model, "lm_head"):
            return base, layout
    raise ValueError(
        f"model: the {hf_model.config.model_type} family has neither the Llama layout (embed_tokens, "
        "layers, norm, rotary_emb) nor GPT-2's (wte, wpe, h, ln_f): model=hf/causal_lm takes the "
        "Llama, Qwen2, Mistral and GPT-2 families and those of their layouts"
    )


def hf_name(name: str, layout: Layout, prefix: str) -> str:
    """Our parameter name as the library's (``layers.0.attn.c_attn.weight`` -> ``transformer.h.0...``)."""
    head, _, rest = name.partition(".")
    if head == "lm_head":
        return name
    return f"{prefix}.{layout.parts.get(head, head)}" + (f".{rest}" if rest else "")
