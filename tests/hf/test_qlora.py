"""QLoRA's base quantized as it is read: the model built on the meta device and made real one
parameter at a time holds, bit for bit, the NF4 weights (and every other tensor) of the model built
whole and then quantized; an NF4 weight counts as what it holds (4 bits a weight and its scales) in
results.json, the memory plan and the size check before start; and on SmolLM2-135M QLoRA's model state
and peak resident memory are below LoRA's by what the NF4 base saves."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.config.schemas import AdapterConfig
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY

transformers = pytest.importorskip("transformers")
pytest.importorskip("torchao")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny Llama of tied embeddings, its linears of whole blocks of 64 weights."""
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def _tensors(model) -> dict:
    """Every parameter's tensors: an NF4 weight's inner ones (its codes, scales, factors, mean)."""
    from framework.models.nf4 import is_nf4

    out = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        inner = param.__tensor_flatten__()[0] if is_nf4(param) else []
        out.update({f"{name}.{part}": getattr(param, part) for part in inner} or {name: param})
        out[f"{name} requires_grad"] = param.requires_grad
    return out


def _assert_same(streamed, whole) -> None:
    a, b = _tensors(streamed), _tensors(whole)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key] if isinstance(a[key], bool) else torch.equal(a[key], b[key]), key
    assert [type(m) for m in streamed.modules()] == [type(m) for m in whole.modules()]


def _qlora(base, *more: str) -> list[str]:
    return [
        *(o for o in GPT_TINY if not o.startswith("model=")),
        "model=hf/causal_lm",
        f"model.path={base}",
        "adapter=qlora",
        "adapter.r=4",
        *more,
    ]


@pytest.mark.parametrize("dora", [False, True])
def test_the_base_read_and_quantized_a_tensor_at_a_time_is_the_whole_models_quantized(base, dora):
    """Through the ranks' own build (rank/build.py): the model on the meta device, its adapters, then
    each weight read and quantized; against the model built whole, adapted and quantized (quantize_base)."""
    from framework.config.experiment import Experiment
    from framework.models import HFCausalLM
    from framework.models.lora import inject_adapters
    from framework.rank.build import build_components

    run = Experiment.of(compose(_qlora(base, "logger=none", *(["adapter.use_dora=true"] if dora else []))))
    torch.manual_seed(5)
    streamed = build_components(run, False).model
    assert streamed.lm_head.weight is streamed.embed_tokens.weight  # (still tied)
    torch.manual_seed(5)
    whole = HFCausalLM(path=str(base))
    inject_adapters(whole, run.adapter, torch.initial_seed())
    _assert_same(streamed, whole)


def test_a_drawn_model_streams_too_and_another_is_built_whole(tmp_path):
    """The built-in GPT's draws (by name) and a Hugging Face model from its config give their
    parameters one at a time as well; a model without ``parameter_source`` is built whole, as before."""
    from framework.models import HFCausalLM
    from framework.models.gpt import GPT
    from framework.models.lora import inject_adapters
    from framework.models.qlora import materialize_quantized

    settings = AdapterConfig(r=4, quantize="nf4", use_dora=True)
    llama = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128}
    llama.update(num_hidden_layers=2, num_attention_heads=4)
    for make in (lambda: GPT(vocab_size=128, dim=64, n_layers=2, n_heads=4), lambda: HFCausalLM(config=llama)):
        torch.manual_seed(9)
        whole = make()
        inject_adapters(whole, settings, 9)
        with torch.device("meta"):
            streamed = make()
        inject_adapters(streamed, settings, 9)
        assert materialize_quantized(streamed, 9) == 14  # (2 layers of 7 linears; the head stays whole)
        _assert_same(streamed, whole)


def test_an_nf4_weight_counts_what_it_holds(base, tmp_path):
    """4 bits a weight, an int8 scale per block of 64, an fp32 factor per group of scales, the mean and
    the 16 code values: results.json's model state is the plan's, and a QLoRA run's is LoRA's less what
    the base saves."""
    from framework.engine.memory import held_bytes
    from framework.job.plan import plan
    from framework.models.nf4 import bytes_saved, nf4_bytes, set_nf4

    linear = torch.nn.Linear(128, 64, bias=False)
    set_nf4(linear, linear.weight.detach())
    assert held_bytes(linear.weight) == nf4_bytes(128 * 64) == 4096 + 128 + 4 * 8 + 4 + 64  # (8 groups of 16 scales)
    runs = {}
    for adapter in ("lora", "qlora"):
        overrides = [*_qlora(base, f"adapter={adapter}", "trainer.max_steps=2", "test=false", "callbacks=none")]
        runs[adapter] = fit(compose(overrides), output_dir=str(tmp_path / adapter))["memory"]
        [row] = [r for r in plan(compose(overrides)) if r["strategy"] == "fsdp" and r["devices"] == 1]  # (as single)
        assert runs[adapter]["predicted_model_state_bytes"] == pytest.approx(row["model_state_bytes_per_rank"])
        assert runs[adapter]["model_state_bytes_per_rank"][0] == pytest.approx(
            row["model_state_bytes_per_rank"], rel=0.01
        )
    # 2 layers x 7 linears (64 x 64 q and o, 64 x 32 k and v, 64 x 128 gate, up and down) in NF4
    sizes = [64 * 64] * 2 + [64 * 32] * 2 + [64 * 128] * 3
    saved = 2 * sum(4 * n - nf4_bytes(n) for n in sizes)
    with torch.device("meta"):
        from framework.models import HFCausalLM

        assert bytes_saved(HFCausalLM(path=str(base))) == saved
    lora, qlora = runs["lora"]["model_state_bytes_per_rank"][0], runs["qlora"]["model_state_bytes_per_rank"][0]
    assert lora - qlora == saved


def test_the_size_check_counts_the_base_in_four_bits(base):
    """A memory limit between QLoRA's model state and LoRA's: LoRA refused before start, QLoRA not."""
    from framework.job.plan import plan

    rows = {a: plan(compose(_qlora(base, f"adapter={a}"))) for a in ("lora", "qlora")}
    rows = {a: next(r for r in rows[a] if r["devices"] == 1)["model_state_bytes_per_rank"] for a in rows}
    limit = int((rows["lora"] + rows["qlora"]) / 2)
    assert rows["qlora"] < limit < rows["lora"]
    with pytest.raises(ConfigError) as err:
        preflight(compose(_qlora(base, "adapter=lora", f"trainer.memory_limit={limit}")))
    assert any(p.startswith("model: its config makes about") for p in err.value.problems), err.value.problems
    preflight(compose(_qlora(base, f"trainer.memory_limit={limit}")))
