"""The tensor-parallel plan of a Hugging Face decoder (Llama, Qwen2, Mistral and the other families
whose config declares ``base_model_tp_plan``): the config's colwise/rowwise layers, and, as
torchtitan's Llama plan does, the embedding split by rows, the head by columns, and with sequence
parallelism the norms and the residual stream sharded along the sequence between them."""

from __future__ import annotations

import fnmatch

from torch import nn

# replicated_with_grad_allreduce: a norm over each head's features (Qwen3's q_norm, k_norm) of a head-split input
SUPPORTED = ("colwise", "rowwise", "replicated_with_grad_allreduce")


def _block_plan(block: nn.Module, prefix: str, between, sequence_parallel: bool) -> dict:
    """A decoder layer's norms (SequenceParallel) and the inputs of its attention and MLP gathered
    from the sequence shards."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel

    if not sequence_parallel:
        return {}
    plan = {
        f"{prefix}.{name}": SequenceParallel()
        for name, child in block.named_children()
        if type(child).__name__.endswith(("RMSNorm", "LayerNorm"))
    }
    for name, _child in block.named_children():
        if name in ("self_attn", "attention"):  # called with hidden_states=...
            plan[f"{prefix}.{name}"] = PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": between},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
            )
        elif name in ("mlp", "feed_forward"):
            plan[f"{prefix}.{name}"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
    return plan


def _style(style: str, between):
    """The ParallelStyle of one of the config's style names."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if style == "colwise":
        return ColwiseParallel()
    if style == "rowwise":
        return RowwiseParallel(output_layouts=between)
    # a norm of [batch, seq, heads, head_dim] with the heads split: its weight whole on every rank, its
    # gradient summed over them (what SequenceParallel does along a dimension the op keeps apart)
    return SequenceParallel(sequence_dim=2, use_local_output=True)


class DeclaredPlan:
    """A family's tensor-parallel plan as its config declares it (``base_model_tp_plan``: ``{module
    pattern: style}``, ``layers.*.self_attn.q_proj: colwise``): checked against a model's modules
    before start, and built into the ParallelStyles of the modules a rank's model has."""

    def __init__(self, hf_config):
        self.styles: dict[str, str] = dict(getattr(hf_config, "base_model_tp_plan", None) or {})
        self.family = getattr(hf_config, "model_type", "?")

    def problems(self, model: nn.Module) -> list[str]:
        """A family without a plan, a style this plan does not apply, or a pattern that names a module
        the model lacks (a config edited by hand, or a family whose modules moved)."""
        declared, family = self.styles, self.family
        if not declared:
            return [
                f"model: the {family} family declares no tensor-parallel plan (its config's base_model_tp_plan): "
                "strategy=tp and fsdp_tp cannot split it; choose ddp, fsdp or pp"
            ]
        names = [n for n, _ in model.named_modules() if n]
        problems = [
            f"model: the {family} plan's {pattern}: {style!r} is not applied here (only {', '.join(SUPPORTED)}); "
            "choose ddp, fsdp or pp for this model"
            for pattern, style in declared.items()
            if style not in SUPPORTED
        ]
        modules = dict(model.named_modules())
        problems += [
            f"model: the {family} plan's {pattern}: {style!r} is applied to norms only, and {name} is a "
            f"{type(modules[name]).__name__}; choose ddp, fsdp or pp for this model"
            for pattern, style in declared.items()
            if style == "replicated_with_grad_allreduce"
            for name in names
            if fnmatch.fnmatchcase(name, pattern) and "Norm" not in type(modules[name]).__name__
        ][:3]
        problems += [
            f"model: the {family} plan names {pattern}, which matches no module of the model; "
            "choose ddp, fsdp or pp for this model"
            for pattern in declared
            if not any(fnmatch.fnmatchcase(n, pattern) for n in names)
        ]
        return problems

    def build(self, model: nn.Module, sequence_parallel: bool) -> dict:
        """Module name -> ParallelStyle for the modules this rank's (possibly pipeline-cut) model has."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

        between = Shard(1) if sequence_parallel else Replicate()
        plan = {
            "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
            "lm_head": ColwiseParallel(input_layouts=between, output_layouts=Replicate(), use_local_output=True),
        }
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
        plan = {name: style for name, style in plan.items() if getattr(model, name, None) is not None}
        names = [n for n, _ in model.named_modules() if n.startswith("layers.")]
        for pattern, style in self.styles.items():
            for name in names:
                if fnmatch.fnmatchcase(name, pattern):
                    plan[name] = _style(style, between)
        for key, block in model.layers.items():
            plan.update(_block_plan(block, f"layers.{key}", between, sequence_parallel))
        return plan
