"""A Hugging Face Llama (built from a transformers config, saved by save_pretrained, loaded from that
directory) under every strategy: the same per-step losses as one device, checkpoints that resume
under another layout, and an export that from_pretrained loads with the engine's logits."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import runs_once

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.multiprocess

LAYOUTS = {
    "single": ["strategy=single"],
    "ddp": ["strategy=ddp", "trainer.devices=2"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
    "tp": ["strategy=tp", "trainer.devices=2"],
    "fsdp_tp": ["strategy=fsdp_tp", "trainer.devices=4", "strategy.tensor_parallel=2", "trainer.oversubscribe=true"],
    "pp": ["strategy=pp", "trainer.devices=2"],
    "pp_tp": ["strategy=pp", "trainer.devices=4", "strategy.tensor_parallel=2", "trainer.oversubscribe=true"],
}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Llama (byte vocabulary, 2 layers) saved as a user's pretrained model would be."""
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny_llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def hf_tiny(llama_dir) -> list[str]:
    return [*(o for o in GPT_TINY if not o.startswith("model=")), "model=hf/causal_lm", f"model.path={llama_dir}"]


EQUIVALENCE = [
    "callbacks=none",
    "trainer.max_steps=8",
    "trainer.gradient_clip_val=0.5",
    "trainer.accumulate_grad_batches=2",
    "export_weights=true",
]


@pytest.fixture(scope="module")
def single(llama_dir, tmp_path_factory):
    return runs_once(tmp_path_factory, [*hf_tiny(llama_dir), *EQUIVALENCE], LAYOUTS)("single")


@pytest.mark.parametrize("layout", ["ddp", "fsdp", "tp", "fsdp_tp", "pp", "pp_tp"])
def test_every_layout_trains_the_pretrained_llama_as_one_device(layout, llama_dir, single, tmp_path):
    single_dir, single_results = single
    results = fit(compose([*hf_tiny(llama_dir), *EQUIVALENCE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["steps"] == single_results["steps"] == 8
    expected, got = train_losses(single_dir), train_losses(tmp_path)
    assert len(got) == len(expected) == 8
    assert got == pytest.approx(expected, rel=1e-5)
    assert results["metrics"]["val/loss"] == pytest.approx(single_results["metrics"]["val/loss"], rel=1e-5)
    ref, weights = torch.load(single_dir / "model.pt"), torch.load(tmp_path / "model.pt")
    assert set(weights) == set(ref)
    for name, tensor in ref.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-3, atol=5e-5, msg=name)


RESUME = [
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=4",
    "trainer.num_sanity_val_steps=0",
    "trainer.limit_val_batches=1",
    "test=false",
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.filename='epoch{epoch}'",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.save_top_k=-1",
]


@pytest.fixture(scope="module")
def saved(llama_dir, tmp_path_factory):
    return runs_once(tmp_path_factory, [*hf_tiny(llama_dir), *RESUME], LAYOUTS)


# a cycle through the three most unlike layouts (whole, 2-D sharded, cut into stages): each a source
# and a target once (tests/strategies covers every pair of the built-in transformer's layouts)
@pytest.mark.parametrize("source,target", [("single", "fsdp_tp"), ("fsdp_tp", "pp"), ("pp", "single")])
def test_a_checkpoint_of_one_layout_resumes_under_another(saved, llama_dir, tmp_path, source, target):
    reference, _ = saved("single")
    source_dir, _ = saved(source)
    resumed = fit(
        compose([*hf_tiny(llama_dir), *RESUME, *LAYOUTS[target], f"ckpt_path={source_dir / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path),
    )
    assert resumed["steps"] == 12
    # steps 5..12 after the epoch-0 checkpoint: AdamW's moments came along
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference)[4:], rel=1e-6)


@pytest.mark.parametrize("layout", ["fsdp_tp"])
def test_the_export_loads_in_transformers_with_the_engines_logits(layout, llama_dir, tmp_path):
    # the same run twice (deterministic): its weights gathered as model.pt, and as model_hf/
    run = [
        *hf_tiny(llama_dir),
        "callbacks=none",
        "trainer.max_steps=3",
        "test=false",
        "export_weights=true",
        *LAYOUTS[layout],
    ]
    for export in ("pt", "hf"):
        assert (
            fit(compose([*run, f"export_format={export}"]), output_dir=str(tmp_path / export))["status"] == "completed"
        )
    from framework.models import HFCausalLM

    engine = HFCausalLM(path=str(llama_dir))
    engine.load_state_dict(torch.load(tmp_path / "pt" / "model.pt"))
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf" / "model_hf", local_files_only=True)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(exported.eval()(tokens).logits, engine.eval()(tokens), rtol=0, atol=1e-6)
        start = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, local_files_only=True).eval()(tokens)
    assert not torch.allclose(start.logits, engine(tokens))  # trained weights, not the ones it started from


def test_activation_checkpointing_by_the_models_layer_class(llama_dir, single, tmp_path):
    single_dir, _ = single
    results = fit(
        compose(
            [
                *hf_tiny(llama_dir),
                *EQUIVALENCE,
                "trainer.activation_checkpointing=[LlamaDecoderLayer]",
                *LAYOUTS["fsdp"],
            ]
        ),
        output_dir=str(tmp_path),
    )
    assert results["status"] == "completed"
    assert train_losses(tmp_path) == pytest.approx(train_losses(single_dir), rel=1e-5)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny GPT-2 (learned positions, Conv1D layers), untied so that a pipeline can cut it."""
    config = transformers.GPT2Config(
        vocab_size=256,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny_gpt2")
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def gpt2_single(gpt2_dir, tmp_path_factory):
    return runs_once(tmp_path_factory, [*hf_tiny(gpt2_dir), *EQUIVALENCE], LAYOUTS)("single")


@pytest.mark.parametrize("layout", ["pp"])
def test_the_gpt2_family_trains_as_one_device_too(layout, gpt2_dir, gpt2_single, tmp_path):
    single_dir, _ = gpt2_single
    results = fit(compose([*hf_tiny(gpt2_dir), *EQUIVALENCE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert results["status"] == "completed"
    assert train_losses(tmp_path) == pytest.approx(train_losses(single_dir), rel=1e-5)


def test_qwen3s_head_norms_train_tensor_parallel_as_one_device(tmp_path):
    # its plan's q_norm / k_norm are replicated_with_grad_allreduce: whole on each rank, gradients summed
    config = transformers.Qwen3Config(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(config).save_pretrained(tmp_path / "qwen3")
    run = [
        *hf_tiny(tmp_path / "qwen3"),
        "callbacks=none",
        "trainer.max_steps=6",
        "test=false",
        "trainer.limit_val_batches=0",
    ]
    for layout in ("single", "tp"):
        assert fit(compose([*run, *LAYOUTS[layout]]), output_dir=str(tmp_path / layout))["status"] == "completed"
    assert train_losses(tmp_path / "tp") == pytest.approx(train_losses(tmp_path / "single"), rel=1e-5)
    assert len(train_losses(tmp_path / "tp")) == 6
