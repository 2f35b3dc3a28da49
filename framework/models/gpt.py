"""A Llama-style decoder language model: token embedding, blocks of RMSNorm + causal self-attention
(rotary positions, grouped-query heads, ``scaled_dot_product_attention``) + RMSNorm + SwiGLU
feed-forward, a final RMSNorm and an output head.

Built for every strategy: the blocks sit in a ``ModuleDict`` keyed by index, so a parameter's name
(``layers.3.attention.wq.weight``) is the same in any part of a split model; attention infers its
local head count from its projections' output size, so the same code runs tensor-parallel; the
weights are initialised per parameter from a generator seeded by (seed, name) on the full shape,
so a model built on the meta device and materialised shard by shard (``init_weights``) holds
exactly the weights it would have had built whole. ``parallelize_plan`` is its tensor-parallel
plan (torchtitan's for Llama).
"""

from __future__ import annotations

import functools
import math
import zlib
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from framework.config.ranges import Range
from framework.models.documents import document_mask
from framework.models.kv_cache import DecodingCache
from framework.models.lora import is_adapter
from framework.models.moe import FeedForward, MoE
from framework.models.shards import copy_into


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_tables(head_dim: int, max_seq_len: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, [max_seq_len, head_dim / 2] each."""
    inverse = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float32), inverse)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of ``x`` ([batch, seq, heads, head_dim]) by the position's angles."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    first, second = pairs[..., 0], pairs[..., 1]
    # tables [seq, head_dim / 2], or [batch, seq, head_dim / 2] for positions of their own
    cos, sin = (cos[None, :, None, :], sin[None, :, None, :]) if cos.dim() == 2 else (cos[:, :, None], sin[:, :, None])
    rotated = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, dropout: float):
        super().__init__()
        self.head_dim, self.group = dim // n_heads, n_heads // n_kv_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.dropout = dropout

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        keep: Optional[Callable] = None,
    ) -> torch.Tensor:
        """``keep(keys, values)``: generation's cache takes this forward's keys and values and returns
        every position's so far."""
        batch, seq, _ = x.shape
        # the tables of the first ``seq`` positions: here the whole sequence, also where the blocks
        # between see a sequence-parallel shard of it (a later pipeline stage gets only that)
        if cos.dim() == 2:
            cos, sin = cos[:seq], sin[:seq]
        # -1: the heads this rank holds (all of them, or its tensor-parallel share)
        q = apply_rotary(self.wq(x).view(batch, seq, -1, self.head_dim), cos, sin)
        k = apply_rotary(self.wk(x).view(batch, seq, -1, self.head_dim), cos, sin)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        if keep is not None:
            k, v = keep(k, v)
        # grouped-query attention: each key/value head serves `group` query heads (enable_gqa: the keys
        # and values are not repeated in memory, nor in context parallelism's all-gather)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            dropout_p=self.dropout if self.training else 0.0,
            # (causal by torch's rule, query i attends key j <= i: only where queries and keys are the same positions)
            is_causal=mask is None and k.shape[1] == seq,
            enable_gqa=self.group > 1,
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(
        self,
        dim: int,
        n_heads: int,
        n_kv_heads: int,
        ffn_hidden: int,
        dropout: float,
        eps: float,
        experts: Optional[dict] = None,
    ):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(dim, eps), RMSNorm(dim, eps)
        self.attention = Attention(dim, n_heads, n_kv_heads, dropout)
        # experts: MoE's arguments (n_experts, top_k, ...): routed experts in place of the feed-forward
        self.feed_forward = MoE(dim, ffn_hidden, **experts) if experts else FeedForward(dim, ffn_hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        keep: Optional[Callable] = None,
    ) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), cos, sin, mask=mask, keep=keep))
        return x + self.dropout(self.feed_forward(self.ffn_norm(x)))


class GPT(nn.Module):
    """``forward(tokens [batch, seq]) -> logits [batch, seq, vocab_size]``."""

    inputs, outputs = "token ids", "logits per token"  # what the checks before start match against data and task
    adapter_targets = ("wq", "wk", "wv", "wo")  # what adapter=lora adapts unless adapter.target_modules says

    block_classes = ("Block",)  # what trainer.compile=blocks compiles one by one
    # indexed by position: context parallelism starts them at each rank's part of the sequence
    context_parallel_buffers = ("rope_cos", "rope_sin")

    argument_ranges = {
        "vocab_size": Range(low=1),
        "dim": Range(low=1),
        "n_layers": Range(low=1),
        "n_heads": Range(low=1),
        "n_kv_heads": Range(low=1),
        "ffn_hidden": Range(low=1),
        "max_seq_len": Range(low=1),
        "dropout": Range(low=0, high=1, high_strict=True),
        "n_experts": Range(low=0),
        "top_k": Range(low=1),
        "capacity_factor": Range(low=0, strict=True),
        "aux_loss_weight": Range(low=0),
    }

    def __init__(
        self,
        vocab_size: int = 256,
        dim: int = 256,
        n_layers: int = 4,
        n_heads: int = 8,
        n_kv_heads: Optional[int] = None,
        ffn_hidden: Optional[int] = None,
        max_seq_len: int = 256,
        dropout: float = 0.0,
        tie_embeddings: bool = False,
        rope_theta: float = 10000.0,
        norm_eps: float = 1e-5,
        n_experts: int = 0,
        top_k: int = 2,
        shared_expert: bool = False,
        capacity_factor: Optional[float] = None,
        aux_loss_weight: float = 0.01,
    ):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        ffn_hidden = ffn_hidden or 4 * dim
        # n_experts > 0: a mixture of experts (framework/models/moe.py) in every block
        experts = dict(n_experts=n_experts, top_k=top_k, shared_expert=shared_expert, capacity_factor=capacity_factor)
        experts = experts if n_experts else None
        self.aux_loss_weight = aux_loss_weight
        self.aux_loss: Optional[torch.Tensor] = None  # the last training forward's, weighted
        if experts:
            self.pipeline_splittable = False  # its balancing loss counts every rank's tokens together
        self.config = dict(vocab_size=vocab_size, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads)
        self.config.update(ffn_hidden=ffn_hidden, max_seq_len=max_seq_len, tie_embeddings=tie_embeddings)
        self.config.update(n_experts=n_experts)
        self.rope_theta = rope_theta
        # (_weight: no init here, init_weights draws every weight; and a random op on the meta device
        # would import torch's compiler, seconds in a fresh rank)
        self.tok_embeddings = nn.Embedding(vocab_size, dim, _weight=torch.empty(vocab_size, dim))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleDict(
            {str(i): Block(dim, n_heads, n_kv_heads, ffn_hidden, dropout, norm_eps, experts) for i in range(n_layers)}
        )
        self.norm = RMSNorm(dim, norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        if tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # (on the CPU when the model is on the meta device: tensor maths there imports torch's compiler)
        self._rotary("cpu" if self.tok_embeddings.weight.is_meta else self.tok_embeddings.weight.device)
        if not self.tok_embeddings.weight.is_meta:
            self.init_weights(torch.initial_seed())

    @classmethod
    def check_config(cls, dim: int = 256, n_heads: int = 8, n_kv_heads: Optional[int] = None, **rest) -> list[str]:
        if not all(isinstance(v, int) and v > 0 for v in (dim, n_heads)):
            return []
        problems = [] if dim % n_heads == 0 else [f"dim: {dim} is not divisible by n_heads={n_heads}"]
        n_experts, top_k = rest.get("n_experts", 0), rest.get("top_k", 2)
        if isinstance(n_experts, int) and isinstance(top_k, int) and 0 < n_experts < top_k:
            problems.append(f"top_k: {top_k} experts per token, but n_experts={n_experts}")
        kv = n_kv_heads or n_heads
        if isinstance(kv, int) and kv > 0 and n_heads % kv:
            problems.append(f"n_kv_heads: n_heads={n_heads} is not divisible by n_kv_heads={kv}")
        return problems

    def tensor_parallel_problems(self, tp: int, seq_len: Optional[int] = None) -> list[str]:
        """What keeps ``parallelize_plan`` from splitting this model ``tp`` ways (``seq_len``: the
        sequence length, when sequence parallelism splits it too)."""
        where = f"the tensor-parallel degree {tp} (strategy=tp on {tp} ranks, or strategy.tp)"
        c = self.config
        problems = [
            f"model.{key}: {c[key]} is not divisible by {where}"
            for key in ("n_heads", "n_kv_heads", "ffn_hidden", "vocab_size")
            if c[key] % tp
        ]
        if isinstance(seq_len, int) and seq_len % tp:
            problems.append(
                f"datamodule.seq_len: {seq_len} is not divisible by the tensor-parallel degree {tp} with "
                "sequence parallelism; choose a multiple, or set strategy.sequence_parallel=false"
            )
        if c["tie_embeddings"] and tp > 1:
            problems.append(
                "model.tie_embeddings: a tied embedding and output head cannot be split by the "
                "tensor-parallel plan (the embedding is split by rows, the head by columns); set "
                "model.tie_embeddings=false"
            )
        return problems

    def _rotary(self, device) -> None:
        cos, sin = rotary_tables(
            self.config["dim"] // self.config["n_heads"], self.config["max_seq_len"], self.rope_theta, device
        )
        # not state: recomputed wherever the model is built or materialised
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Every parameter from a generator of its own (seeded by ``seed`` and its name), drawn on
        its full shape and copied into this rank's shard (a DTensor's local part): the same weights
        whatever the layout, and one full parameter in memory at a time."""
        weight = next(self.parameters())  # (a pipeline stage may have no embedding)
        self._rotary(weight.device if not weight.is_meta else "cpu")
        draw = self.parameter_source(seed)
        for name, param in self.named_parameters():
            if not is_adapter(name):  # (an adapter's own init draws it: framework/models/lora.py)
                copy_into(param, draw(name, param.shape))

    def parameter_source(self, seed: int = 0) -> Callable[[str, torch.Size], torch.Tensor]:
        """``(name, shape) -> `` the whole value ``init_weights`` draws for the parameter ``name`` (fp32):
        a build that quantizes the base as it draws it (QLoRA, framework/models/lora.py
        ``materialize_quantized``) never holds it whole."""
        std, depth = 0.02, math.sqrt(2 * self.config["n_layers"])

        def draw(name: str, shape: torch.Size) -> torch.Tensor:
            if name.endswith("norm.weight"):
                return torch.ones(shape)
            generator = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
            if name.endswith(("wo.weight", "w2.weight", "experts.w2")):  # residual projections, scaled by depth
                return torch.randn(shape, generator=generator) * (std / depth)
            return torch.randn(shape, generator=generator) * std

        return draw

    # A pipeline stage is this model with the modules of the other stages removed (set to None,
    # blocks deleted from ``layers``): forward then runs what is left, from tokens or hidden states.
    pipeline_splittable = True

    def forward(
        self, tokens: torch.Tensor, positions: Optional[torch.Tensor] = None, cache: Optional[DecodingCache] = None
    ) -> torch.Tensor:
        """``positions`` (each token's position in its document, 0 where one starts): rotary angles of
        those positions, and attention within each document only. ``cache``: generation's, which
        holds the keys and values of the tokens before ``tokens`` and says their positions."""
        h = self.dropout(self.tok_embeddings(tokens)) if self.tok_embeddings is not None else tokens
        cos, sin, mask = self.rope_cos, self.rope_sin, None
        if positions is not None:
            cos, sin, mask = cos[positions], sin[positions], document_mask(positions)
        if cache is not None:
            cos, sin, mask = cos[cache.positions], sin[cache.positions], cache.mask
        for name, block in self.layers.items():
            h = block(h, cos, sin, mask=mask, keep=functools.partial(cache.update, name) if cache else None)
        if self.config["n_experts"]:
            self.aux_loss = self.aux_loss_weight * sum(
                block.feed_forward.aux_loss for block in self.layers.values() if isinstance(block.feed_forward, MoE)
            )
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h

    def parallelize_plan(self, sequence_parallel: bool = True) -> dict:
        """The tensor-parallel plan (module name -> torch's ParallelStyle), torchtitan's for Llama:
        q/k/v and w1/w3 column-wise, wo and w2 row-wise; with ``sequence_parallel`` the norms and
        the residual stream are sharded along the sequence between them."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            SequenceParallel,
        )

        between = Shard(1) if sequence_parallel else Replicate()
        plan = {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
            "output": ColwiseParallel(input_layouts=between, output_layouts=Replicate(), use_local_output=True),
        }
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
        # (a pipeline stage has only some of them: the hidden states reach the next stage as they are between blocks)
        plan = {name: style for name, style in plan.items() if getattr(self, name) is not None}
        for i in self.layers:
            block = {
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(output_layouts=between),
                **self._feed_forward_plan(between),
            }
            if sequence_parallel:
                block.update(
                    {
                        "attention_norm": SequenceParallel(),
                        "ffn_norm": SequenceParallel(),
                        "attention": PrepareModuleInput(
                            input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
                        ),
                    }
                )
                if not self.config["n_experts"]:  # (a MoE layer gathers its tokens itself)
                    block["feed_forward"] = PrepareModuleInput(
                        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
                    )
            plan.update({f"layers.{i}.{name}": style for name, style in block.items()})
        return plan

    def _feed_forward_plan(self, between) -> dict:
        """A SwiGLU's w1/w3 column-wise and w2 row-wise; a mixture of experts' the same in every expert."""
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        from framework.models.moe_tensor_parallel import MoETensorParallel

        if self.config["n_experts"]:
            return {"feed_forward": MoETensorParallel(between)}
        return {
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=between),
        }
