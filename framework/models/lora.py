"""Low-rank adapters (LoRA, DoRA; QLoRA's NF4 base in framework/models/nf4.py) on a frozen model.

An adapted ``nn.Linear`` stays the same module at the same place with the same ``weight``: its class
becomes ``LoRALinear``, which adds ``lora_a`` [r, in] and ``lora_b`` [out, r] (and DoRA's
``lora_magnitude`` [out]) and computes ``W x + b + (alpha / r) B A dropout(x)``. So the base keeps
every parameter name (a checkpoint, a tensor-parallel plan, a pipeline's cut and the saved weights
of a Hugging Face model still find theirs), and a tensor-parallel split of the linear splits its
adapter with it (``split_adapters``). peft's names and format are the export's (hf_adapters.py).

Adapter weights are drawn per parameter from a generator seeded by (seed, name) on their full shape,
as the built-in GPT's are: A uniform in +-1/sqrt(in) (nn.Linear's default, peft's), B zero (the
adapted model starts as the base); the same whatever the layout.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import re
import zlib
from pathlib import Path
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn

from framework.config.schemas import AdapterConfig
from framework.models.nf4 import is_nf4, nf4_linear, quantize_base
from framework.models.shards import copy_into

ADAPTER_PARAMETERS = ("lora_a", "lora_b", "lora_magnitude")


def is_adapter(name: str) -> bool:
    """Whether the parameter ``name`` is an adapter's (not the base model's)."""
    return name.rpartition(".")[2] in ADAPTER_PARAMETERS


class LoRALinear(nn.Linear):
    """An ``nn.Linear`` with a low-rank update (made by ``adapt``, never built directly)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = self.base_forward(x)
        if getattr(self, "lora_off", False):  # (within adapters_off: the base alone, DoRA's magnitude too)
            return base
        dropped = F.dropout(x, self.lora_dropout, self.training) if self.lora_dropout else x
        low = F.linear(F.linear(dropped, self.lora_a), self.lora_b)
        if self.lora_magnitude is None:
            return base + self.lora_scale * low
        # DoRA: the direction of W + s B A, each output row scaled by its magnitude (norm detached, as peft)
        weight = self.weight.to(torch.float32) if is_nf4(self.weight) else self.weight
        norm = (weight + self.lora_scale * self.lora_b @ self.lora_a).norm(dim=1).detach()
        factor = self.lora_magnitude / norm
        bias = 0 if self.bias is None else self.bias
        return factor * (base - bias + self.lora_scale * low) + bias

    def base_forward(self, x: torch.Tensor) -> torch.Tensor:
        if is_nf4(self.weight):  # QLoRA's 4-bit base
            return nf4_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


@contextlib.contextmanager
def adapters_off(model: nn.Module) -> Iterator[int]:
    """Within it, every ``LoRALinear`` of ``model`` (wrapped by any strategy: its modules are the plain
    model's) computes its base alone, as peft's ``disable_adapter`` does: preference tuning's reference
    model, without a second copy of the weights. Yields how many layers it switched off."""
    adapted = [m for m in model.modules() if isinstance(m, LoRALinear)]
    for module in adapted:
        module.lora_off = True
    try:
        yield len(adapted)
    finally:
        for module in adapted:
            module.lora_off = False


def adapt(module: nn.Linear, settings: AdapterConfig) -> None:
    """Make ``module`` a LoRALinear in place (on the meta device too: its tensors are created where
    its weight is); the base's parameters frozen."""
    out_features, in_features = module.weight.shape
    like = {"device": module.weight.device, "dtype": torch.float32}
    module.__class__ = LoRALinear if not isinstance(module, LoRALinear) else type(module)
    module.lora_a = nn.Parameter(torch.zeros(settings.r, in_features, **like))
    module.lora_b = nn.Parameter(torch.zeros(out_features, settings.r, **like))
    module.lora_magnitude = nn.Parameter(torch.ones(out_features, **like)) if settings.use_dora else None
    module.lora_scale, module.lora_dropout = settings.scale, settings.dropout
    module.weight.requires_grad_(False)
    if module.bias is not None:
        module.bias.requires_grad_(False)


def targets(model: nn.Module, settings: AdapterConfig) -> list[str]:
    """The names of the linear layers ``settings`` adapts (the model's ``adapter_targets`` by default)."""
    wanted = settings.target_modules or list(getattr(model, "adapter_targets", ()))
    names = [name for name, m in model.named_modules() if name and isinstance(m, nn.Linear)]
    if isinstance(wanted, str):
        return [n for n in names if re.fullmatch(wanted, n)]
    return [n for n in names if any(n == w or n.endswith(f".{w}") or fnmatch.fnmatchcase(n, w) for w in wanted)]


def adapted_layers(model: nn.Module, settings: AdapterConfig) -> dict[str, tuple[int, int]]:
    """The linear layers ``settings`` adapts, each as (in, out) features (a model on the meta device too:
    what the checks before start count, nothing allocated)."""
    modules = dict(model.named_modules())
    return {name: (modules[name].in_features, modules[name].out_features) for name in targets(model, settings)}


def inject_adapters(model: nn.Module, settings: AdapterConfig, seed: int) -> list[str]:
    """Adapt the target layers of ``model`` and freeze everything else; their weights drawn now, or,
    for a model on the meta device, after its own ``init_weights`` (which this wraps). Returns the
    adapted names."""
    chosen = targets(model, settings)
    for p in model.parameters():
        p.requires_grad_(False)
    for name in chosen:
        adapt(model.get_submodule(name), settings)
    model.adapter_settings = settings
    if any(p.is_meta for p in model.parameters()):
        own = model.init_weights

        def init_weights(seed: int = 0, _own=own) -> None:
            _own(seed)
            init_adapters(model, seed)

        model.init_weights = init_weights
    else:
        init_adapters(model, seed)
        if settings.quantize == "nf4":  # QLoRA: the frozen base's weights in 4 bits (the model built whole)
            quantize_base(model)
    return chosen


@torch.no_grad()
def init_adapters(model: nn.Module, seed: int) -> None:
    """Every adapter parameter (this rank's shard of it): A uniform in +-1/sqrt(in), B zero, DoRA's
    magnitude the base weight's row norms."""
    for name, module in model.named_modules():
        if isinstance(module, LoRALinear):
            init_adapter(name, module, seed)


def init_adapter(name: str, module: LoRALinear, seed: int, base: Optional[torch.Tensor] = None) -> None:
    """The adapters of the linear ``name`` (``base``: its weight's whole fp32 value, where the module's
    is NF4 already; DoRA's magnitude is the norm of the weight before it was quantized)."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    shape = module.lora_a.shape
    bound = 1 / math.sqrt(shape[1])
    copy_into(module.lora_a, torch.rand(shape, generator=generator) * 2 * bound - bound)
    copy_into(module.lora_b, torch.zeros(module.lora_b.shape))
    if module.lora_magnitude is not None:
        weight = _full(module.weight) if base is None else base
        copy_into(module.lora_magnitude, weight.to(torch.float32).norm(dim=1))


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def merged_weights(weights: dict[str, torch.Tensor], settings: AdapterConfig) -> dict[str, torch.Tensor]:
    """A full state dict of an adapted model with each adapter folded into its base weight
    (W + s B A; DoRA: each row scaled to its magnitude), the adapter tensors left out."""
    out = {k: v for k, v in weights.items() if not is_adapter(k)}
    for key in [k for k in weights if k.endswith(".lora_a")]:
        module = key[: -len(".lora_a")]
        base = weights[f"{module}.weight"].float()
        merged = base + settings.scale * weights[f"{module}.lora_b"].float() @ weights[key].float()
        if f"{module}.lora_magnitude" in weights:
            merged = merged * (weights[f"{module}.lora_magnitude"].float() / merged.norm(dim=1))[:, None]
        out[f"{module}.weight"] = merged.to(weights[f"{module}.weight"].dtype)
    return out


def split_adapters(model: nn.Module) -> None:
    """After a tensor-parallel plan split the adapted linears' weights: each adapter split with its
    linear. Column-wise (the weight's rows split): A whole, B's rows split; row-wise (its columns): A's
    columns split, B whole; so W x + s B A x keeps one layout (partial sums reduced as the base's)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, LoRALinear) or not isinstance(weight, DTensor):
            continue
        split = weight.placements[0]
        placements = {
            "lora_a": Shard(1) if split == Shard(1) else Replicate(),
            "lora_b": Shard(0) if split == Shard(0) else Replicate(),
            "lora_magnitude": Shard(0) if split == Shard(0) else Replicate(),
        }
        for name, placement in placements.items():
            param = getattr(module, name)
            if param is None:
                continue
            full = param.full_tensor() if isinstance(param, DTensor) else param.data
            if param.is_meta:
                full = torch.empty(param.shape, device="meta", dtype=param.dtype)
            again = distribute_tensor(full, weight.device_mesh, [placement], src_data_rank=None)
            setattr(module, name, nn.Parameter(again, requires_grad=param.requires_grad))


def base_fingerprint(model: dict, seed, init_weights: Optional[str] = None) -> dict:
    """What the frozen base an adapter trains on is: a saved model's weight files (their CRC-32 and
    directory; a GGUF file's SHA-256), else the config and seed that draw it (and the initial weights'
    file): an adapter checkpoint records it, and a resume on another base is refused."""
    import hashlib
    import json

    from framework.config.gguf_files import file_sha256
    from framework.config.package_paths import is_gguf_file, resolve_path
    from framework.data.token_shards import file_crc32
    from framework.models import hf_files

    path = model.get("path")
    if path and model.get("pretrained", True) and is_gguf_file(str(path)):
        return {"source": str(path), "fingerprint": file_sha256(resolve_path(str(path)))[:16]}
    if path and model.get("pretrained", True):
        files = hf_files.weight_files(hf_files.model_directory(str(path)))
        crc = 0
        for f in files:
            crc = zlib.crc32(file_crc32(f).to_bytes(4, "little"), crc)
        return {"source": str(path), "fingerprint": f"{crc:08x}"}
    described = {"model": model, "seed": seed, "init": init_weights}
    if init_weights:
        weights = Path(init_weights)
        files = sorted(weights.rglob("*")) if weights.is_dir() else [weights]
        described["init_crc"] = [file_crc32(f) for f in files if f.is_file()]
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {
        "source": "model config and seed" + (f", init.weights {init_weights}" if init_weights else ""),
        "fingerprint": digest,
    }


def trainable_per_rank(model: nn.Module, tp: int = 1, shard: int = 1, splits: Optional[dict] = None) -> int:
    """The trainable parameters one rank holds (the most any rank does): ``splits`` {linear's name:
    "colwise" | "rowwise"} of a tensor-parallel degree ``tp`` (an adapter splits with its linear, as
    ``split_adapters`` does), then ``shard`` ways by FSDP along the first dimension."""
    total = 0
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        shape = list(param.shape)
        module, _, leaf = name.rpartition(".")
        split = (splits or {}).get(module) if tp > 1 else None
        if (split, leaf) in (("colwise", "lora_b"), ("colwise", "lora_magnitude")):
            shape[0] = -(-shape[0] // tp)
        elif (split, leaf) == ("rowwise", "lora_a"):
            shape[1] = -(-shape[1] // tp)
        shape[0] = -(-shape[0] // shard)
        total += math.prod(shape)
    return total
