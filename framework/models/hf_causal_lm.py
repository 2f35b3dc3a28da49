"""A Hugging Face decoder language model (Llama, Qwen2, Mistral, GPT-2 and the families of their
layouts, ``hf_layouts``) in the form every strategy of this framework takes, as the built-in GPT is.

The ``transformers`` model's own modules, unpacked: ``embed_tokens`` (and GPT-2's positions), the
decoder layers in ``layers`` (an ``nn.ModuleDict``, so a pipeline stage keeps their names),
``norm``, ``lm_head``; Llama's rotary tables are computed per forward outside the module tree
(every pipeline stage needs them). So ``layers.3.self_attn.q_proj.weight`` is the library's
``model.layers.3.self_attn.q_proj.weight`` (``hf_name``), and:

- ``init_weights`` fills a model materialised from the meta device shard by shard: the saved
  weights (``model.path``, read one tensor at a time), or for a model from ``model.config`` the
  built-in GPT's per-name draws (the same weights whatever the layout);
- ``parallelize_plan`` is the family's tensor-parallel plan (``hf_plan``), FSDP wraps the family's
  ``_no_split_modules``, and ``save_hf`` writes a directory ``from_pretrained`` loads.
"""

from __future__ import annotations

import math
import zlib
from typing import Callable, Optional

import torch
from torch import nn

from framework.models import hf_files, hf_layouts, hf_plan
from framework.models.documents import additive_mask, document_mask
from framework.models.hf_source import HFSource
from framework.models.kv_cache import DecodingCache
from framework.models.lora import is_adapter
from framework.models.shards import copy_into


class HFCausalLM(HFSource, nn.Module):
    """``forward(tokens [batch, seq]) -> logits [batch, seq, vocab]``; ``path``: a saved model
    (``pkg://`` for one inside a package), ``config``: its keys to change, or (no path) the
    ``model_type`` and keys of a model built from scratch; ``pretrained=false`` keeps the saved
    model's shape but starts from the scratch weights."""

    inputs, outputs = "token ids", "logits per token"
    adapter_targets = ("q_proj", "k_proj", "v_proj", "o_proj")  # adapter=lora's default targets

    pipeline_splittable = True
    GROUP = "hf/causal_lm"
    tie_key = "model.config.tie_word_embeddings"  # (where a tied head is untied, for the strategies' messages)

    def __init__(self, path: Optional[str] = None, config: Optional[dict] = None, pretrained: bool = True):
        super().__init__()
        library = hf_files.transformers()
        self.hf_config = hf_files.load_config(path, config)
        whole = library.AutoModelForCausalLM.from_config(
            self.hf_config, dtype=torch.float32, attn_implementation="sdpa"
        )
        base, self.layout = hf_layouts.layout_of(whole)
        self.architecture = type(whole).__name__  # (what the export's config names)
        self.base_prefix = whole.base_model_prefix
        for ours, theirs in self.layout.parts.items():  # (in order: a pipeline cuts the children in this order)
            part = getattr(base, theirs)
            setattr(
                self, ours, nn.ModuleDict({str(i): layer for i, layer in enumerate(part)}) if ours == "layers" else part
            )
        self.lm_head = whole.lm_head
        # rotary tables: built on first use, on the input's device
        self._rotary_class = type(getattr(base, self.layout.rotary)) if self.layout.rotary else None
        self._rotary = None
        self.path, self.pretrained, self._sequence_parallel = path, pretrained, False
        self.fsdp_wrap_classes = list(getattr(whole, "_no_split_modules", None) or [])
        c = self.hf_config
        self.config = dict(
            vocab_size=c.vocab_size,
            max_seq_len=c.max_position_embeddings,
            tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)),
        )
        if not self.embed_tokens.weight.is_meta:
            self.init_weights(torch.initial_seed())

    def hf_name(self, name: str) -> str:
        return hf_layouts.hf_name(name, self.layout, self.base_prefix)

    def _rotary_for(self, device: torch.device) -> nn.Module:
        if self._rotary is None or self._rotary.inv_freq.device != device:
            with torch.device("cpu"):  # (not under a meta-device build)
                rotary = self._rotary_class(config=self.hf_config).to(device)
            object.__setattr__(self, "_rotary", rotary)  # not a submodule: no state, every stage has it
        return self._rotary

    def _sequence_shards(self) -> int:
        """How many sequence-parallel shards a later pipeline stage's input is of the sequence: the
        tensor-parallel degree with sequence parallelism, else 1."""
        if not self._sequence_parallel:
            return 1
        meshes = (getattr(p, "device_mesh", None) for p in self.parameters())
        return next((m["tp"].size() for m in meshes if m is not None and "tp" in (m.mesh_dim_names or ())), 1)

    def forward(
        self, tokens: torch.Tensor, positions: Optional[torch.Tensor] = None, cache: Optional[DecodingCache] = None
    ) -> torch.Tensor:
        """``positions`` (each token's position in its document, 0 where one starts): position ids
        of those positions, and attention within each document only. ``cache``: generation's, which
        holds the keys and values of the tokens before ``tokens`` (in the library's own cache) and
        says their positions."""
        first = self.embed_tokens is not None
        mask = None if positions is None or cache is not None else document_mask(positions)
        positions = cache.positions if cache is not None else positions
        if positions is None:
            # (a later pipeline stage's input is hidden states, with sequence parallelism this rank's shard of them)
            seq = tokens.shape[1] * (1 if first else self._sequence_shards())
            positions = torch.arange(seq, device=tokens.device).unsqueeze(0)
        h = self._embed(tokens, positions) if first else tokens
        extra = {} if mask is None else {"attention_mask": additive_mask(mask, h.dtype)}
        if cache is not None:
            extra = self._cached(cache)
        if self._rotary_class is None:
            for layer in self.layers.values():
                h = layer(h, **extra)
        else:
            cos_sin = self._rotary_for(tokens.device)(h, positions)
            for layer in self.layers.values():
                h = layer(h, position_embeddings=cos_sin, position_ids=positions, **extra)
        if (
            cache is not None
            and cache.logits_at is not None
            and self.lm_head is not None
            and not self._sequence_parallel
        ):
            h = h[:, cache.logits_at].unsqueeze(1)  # the prompt's other positions' logits are never read
        h = self.norm(h) if self.norm is not None else h
        return self.lm_head(h) if self.lm_head is not None else h

    def _cached(self, cache: DecodingCache) -> dict:
        """The layers' arguments for a forward with generation's cache: the library's cache object
        (made on first use) and the mask, a boolean one as the library's own generate passes to sdpa."""
        if cache.library is None:
            cache.library = hf_files.transformers().DynamicCache(config=self.hf_config)
        extra = {self._cache_argument(): cache.library}
        return extra if cache.mask is None else {**extra, "attention_mask": cache.mask}

    def _cache_argument(self) -> str:
        """What the library's decoder layers call their cache (``cache`` since transformers 5.x's
        rename, ``past_key_values`` before)."""
        import inspect

        layer = next(iter(self.layers.values()))
        return "cache" if "cache" in inspect.signature(layer.forward).parameters else "past_key_values"

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(tokens)
        if getattr(self, "embed_positions", None) is not None:  # GPT-2's learned positions
            h = h + self.embed_positions(positions)
        return self.embed_dropout(h) if getattr(self, "embed_dropout", None) is not None else h

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Each parameter (this rank's shard of it): the saved tensor, or a draw of its own."""
        reader = self._reader()
        norms = self._norms()
        for name, param in self.named_parameters():
            if is_adapter(name):  # (an adapter's own init draws it: framework/models/lora.py)
                continue
            if reader is None:
                copy_into(param, self._drawn(name, param.shape, seed, norms))
            else:
                self._load(reader, name, param)

    def parameter_source(self, seed: int = 0) -> Callable[[str, torch.Size], torch.Tensor]:
        """``(name, shape) -> `` the whole fp32 value ``init_weights`` gives the parameter ``name``, one
        at a time (the saved tensor, read alone, or its draw): a build that quantizes the base as it
        reads it (QLoRA, framework/models/lora.py ``materialize_quantized``) never holds it whole."""
        reader, norms = self._reader(), self._norms()
        if reader is None:
            return lambda name, shape: self._drawn(name, shape, seed, norms)
        return lambda name, shape: self._saved(reader, name, shape, ()).to(torch.float32)

    def _reader(self) -> Optional[hf_files.WeightReader]:
        return hf_files.WeightReader(hf_files.model_directory(self.path)) if self.path and self.pretrained else None

    def _norms(self) -> set[str]:
        return {name for name, module in self.named_modules() if "Norm" in type(module).__name__}

    def _load(self, reader: hf_files.WeightReader, name: str, param: torch.Tensor) -> None:
        """The saved tensor's part this rank holds (a DTensor's local shard), read alone."""
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = param.to_local() if isinstance(param, DTensor) else param
        index = ()
        if isinstance(param, DTensor):
            shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
            index = tuple(slice(start, start + size) for start, size in zip(offset, shape))
        local.copy_(self._saved(reader, name, param.shape, index).to(local.device, torch.float32))

    def _saved(self, reader: hf_files.WeightReader, name: str, shape: torch.Size, index: tuple) -> torch.Tensor:
        """``index`` (a slice per dimension; () whole) of the saved tensor of the parameter ``name``,
        checked against its ``shape``."""
        # (a head saved tied, now untied by model.config: it starts as the embedding it was)
        untied = [self.hf_name("embed_tokens.weight")] if name == "lm_head.weight" else []
        saved = next((c for c in (self.hf_name(name), name, *untied) if c in reader), None)
        if saved is None:
            raise ValueError(f"model.path: '{self.path}' has no weights for {self.hf_name(name)}")
        if reader.shape(saved) != list(shape):
            raise ValueError(
                f"model.path: {saved} is saved with shape {reader.shape(saved)}, the model's is "
                f"{list(shape)} (model.config changes the saved architecture)"
            )
        return reader.get_part(saved, index)

    def _drawn(self, name: str, shape: torch.Size, seed: int, norms: set[str]) -> torch.Tensor:
        if name.endswith("bias"):
            return torch.zeros(shape)
        if name.rpartition(".")[0] in norms:
            return torch.ones(shape)
        generator = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
        std = getattr(self.hf_config, "initializer_range", 0.02)
        if name.endswith(("o_proj.weight", "down_proj.weight", "c_proj.weight")):  # residual projections, by depth
            std /= math.sqrt(2 * self.hf_config.num_hidden_layers)  # (a pipeline stage holds only some)
        return torch.randn(shape, generator=generator) * std

    def parallelize_plan(self, sequence_parallel: bool = True) -> dict:
        self._sequence_parallel = sequence_parallel  # (the plan is asked for as it is applied)
        return hf_plan.DeclaredPlan(self.hf_config).build(self, sequence_parallel)

    def tensor_parallel_problems(self, tp: int, seq_len: Optional[int] = None) -> list[str]:
        c, where = self.hf_config, f"the tensor-parallel degree {tp}"
        plan = hf_plan.DeclaredPlan(c).problems(self)
        if plan:
            return plan
        heads = getattr(c, "num_attention_heads", None)
        sizes = {
            "num_attention_heads": heads,
            "intermediate_size": getattr(c, "intermediate_size", None),
            "vocab_size": c.vocab_size,
            "num_key_value_heads": getattr(c, "num_key_value_heads", None) or heads,
        }
        problems = [
            f"model.config.{key}: {value} is not divisible by {where}"
            for key, value in sizes.items()
            if isinstance(value, int) and value % tp
        ]
        if isinstance(seq_len, int) and seq_len % tp:
            problems.append(
                f"datamodule.seq_len: {seq_len} is not divisible by {where} with sequence parallelism; "
                "choose a multiple, or set strategy.sequence_parallel=false"
            )
        if self.config["tie_embeddings"] and tp > 1:
            problems.append(
                "model.config.tie_word_embeddings: a tied embedding and head cannot be split by the "
                "tensor-parallel plan; set model.config.tie_word_embeddings=false"
            )
        return problems

    def hf_weights(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        tied = self.config["tie_embeddings"]
        return {self.hf_name(k): v for k, v in weights.items() if not (tied and k.startswith("lm_head."))}
