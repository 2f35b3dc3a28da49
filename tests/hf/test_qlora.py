"""QLoRA's base quantized as it is read: the model built on the meta device and made real one
parameter at a time holds, bit for bit, the NF4 weights (and every other tensor) of the model built
whole and then quantized."""

from __future__ import annotations

import pytest
import torch

from framework import compose
from framework.config.schemas import AdapterConfig
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
