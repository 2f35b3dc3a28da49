"""A model's parameter count from its config alone, before anything is built or allocated: what the
checks before start hold against the memory a run has (a config with ``hidden_size=10**9`` must be
refused, not built, even on the meta device). Close, not exact: embeddings, attention, feed-forward
(every expert's), norms; biases left out."""

from __future__ import annotations

from typing import Optional


def transformer_parameters(
    vocab: int, dim: int, layers: int, heads: int, kv_heads: int, head_dim: int, hidden: int, **more
) -> int:
    """A decoder's parameters: ``gated`` feed-forwards have three matrices (SwiGLU), else two;
    ``experts`` of them in each layer (0: a plain one); ``tied``: one matrix for embedding and head;
    ``positions``: a learned position table of that many rows."""
    attention = dim * heads * head_dim * 2 + dim * kv_heads * head_dim * 2
    feed_forward = (3 if more.get("gated", True) else 2) * dim * hidden * max(1, more.get("experts", 0))
    router = dim * more.get("experts", 0)
    embeddings = vocab * dim * (1 if more.get("tied") else 2) + more.get("positions", 0) * dim
    return embeddings + layers * (attention + feed_forward + router + 2 * dim) + dim


def gpt_parameters(node: dict) -> Optional[int]:
    """The built-in GPT's (``model.*`` keys, its defaults where a key is not given)."""
    dim, heads = node.get("dim", 256), node.get("n_heads", 8)
    values = [node.get("vocab_size", 256), dim, node.get("n_layers", 4), heads]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values) or dim % heads:
        return None
    return transformer_parameters(
        values[0],
        dim,
        values[2],
        heads,
        node.get("n_kv_heads") or heads,
        dim // heads,
        node.get("ffn_hidden") or 4 * dim,
        tied=node.get("tie_embeddings", False),
        experts=node.get("n_experts", 0) or 0,
    )


def hf_parameters(config) -> Optional[int]:
    """A Hugging Face decoder's or encoder's, from its ``transformers`` config (GPT-2's names too)."""

    def first(*names, default=None):
        return next((getattr(config, n) for n in names if isinstance(getattr(config, n, None), int)), default)

    dim = first("hidden_size", "n_embd", "d_model")
    heads = first("num_attention_heads", "n_head")
    layers, vocab = first("num_hidden_layers", "n_layer"), first("vocab_size")
    if not all(isinstance(v, int) and v > 0 for v in (dim, heads, layers, vocab)):
        return None
    gpt2 = getattr(config, "model_type", "") == "gpt2"
    return transformer_parameters(
        vocab,
        dim,
        layers,
        heads,
        first("num_key_value_heads", default=heads),
        first("head_dim", default=dim // heads) or dim // heads,
        first("intermediate_size", "n_inner", default=4 * dim) or 4 * dim,
        gated=not gpt2 and getattr(config, "model_type", "") not in ("bert", "roberta"),
        tied=bool(getattr(config, "tie_word_embeddings", False)),
        positions=first("n_positions", default=0) if gpt2 else 0,
        experts=first("num_local_experts", "num_experts", default=0),
    )


# the keys that size a model, for the message that names them
SIZE_KEYS = {
    "gpt": ("vocab_size", "dim", "n_layers", "ffn_hidden", "n_experts"),
    "hf": ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_local_experts"),
}
