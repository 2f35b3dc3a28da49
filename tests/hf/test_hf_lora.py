"""LoRA on a Hugging Face Llama (saved by save_pretrained here): single, ddp, fsdp and tp give one
device's losses, the base's weights never move, each rank trains and keeps state for what
framework-plan says; the export loads in peft (and merged, in transformers) with the run's logits;
an adapter checkpoint holds the adapters alone, resumes exactly, and refuses another base."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import runs_once

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def save_llama(directory, seed: int = 0):
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_llama(tmp_path_factory.mktemp("llama"))


def lora(base, *more: str) -> list[str]:
    return [
        *(o for o in GPT_TINY if not o.startswith("model=")),
        "model=hf/causal_lm",
        f"model.path={base}",
        "adapter=lora",
        "adapter.r=4",
        "optimizer.lr=0.01",
        "++optimizer.eps=1e-6",
        "trainer.max_steps=8",
        "trainer.limit_val_batches=0",
        "test=false",
        "callbacks=none",
        *more,
    ]


LAYOUTS = {
    "single": ["strategy=single", "export_weights=true"],
    "ddp": ["strategy=ddp", "trainer.devices=2"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
    "tp": ["strategy=tp", "trainer.devices=2"],
    "fsdp_tp": ["strategy=fsdp_tp", "trainer.devices=4", "strategy.tensor_parallel=2", "trainer.oversubscribe=true"],
}


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory):
    return runs_once(tmp_path_factory, lora(base), LAYOUTS)


@pytest.mark.parametrize("layout", ["ddp", "fsdp", "tp", "fsdp_tp"])
def test_every_layout_trains_the_adapters_as_one_device(layout, runs):
    single_dir, _ = runs("single")
    run_dir, results = runs(layout)
    assert results["status"] == "completed" and results["world_size"] == (4 if layout == "fsdp_tp" else 2)
    assert train_losses(run_dir) == pytest.approx(train_losses(single_dir), rel=1e-5)


@pytest.mark.parametrize("layout", ["single", "ddp", "fsdp", "tp"])
def test_each_rank_trains_and_keeps_state_for_what_the_plan_says(layout, base, runs):
    from framework.job.plan import plan

    _, results = runs(layout)
    memory = results["memory"]
    label, devices = {"single": ("ddp", 1), "ddp": ("ddp", 2), "fsdp": ("fsdp", 2), "tp": ("tp", 2)}[layout]
    [row] = [r for r in plan(compose(lora(base))) if r["strategy"] == label and r["devices"] == devices]
    assert max(memory["trainable_parameters_per_rank"]) == row["trainable_parameters_per_rank"]
    assert max(memory["optimizer_state_bytes_per_rank"]) == row["optimizer_state_bytes_per_rank"]
    assert row["trainable_parameters_per_rank"] < memory["parameters"] / 10  # the adapters, not the model
    # the whole model's weights, as the layout splits them; gradients and AdamW's state for the adapters
    assert memory["predicted_model_state_bytes"] == pytest.approx(row["model_state_bytes_per_rank"])
    assert max(memory["model_state_bytes_per_rank"]) == pytest.approx(row["model_state_bytes_per_rank"], rel=0.02)


def test_the_base_never_moves(base, runs):
    from safetensors.torch import load_file

    run_dir, _ = runs("single")
    exported, saved = torch.load(run_dir / "model.pt"), load_file(base / "model.safetensors")
    base_names = [k for k in exported if "lora_" not in k]
    assert len(base_names) == len(saved)
    for name in base_names:  # bitwise: frozen means untouched by the optimizer, weight decay included
        assert torch.equal(exported[name], saved[name if name.startswith("lm_head") else f"model.{name}"]), name
    assert any(exported[k].abs().sum() > 0 for k in exported if k.endswith("lora_b"))  # the adapters trained


def _logits(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        out = model(tokens)
        return out.logits if hasattr(out, "logits") else out


def test_the_export_loads_in_peft_and_merged_in_transformers_with_the_runs_logits(base, runs, tmp_path):
    from framework.config.schemas import AdapterConfig
    from framework.models import HFCausalLM
    from framework.models.lora import inject_adapters

    run_dir, _ = runs("single")
    ours = HFCausalLM(path=str(base)).eval()
    inject_adapters(ours, AdapterConfig(r=4), 0)
    ours.load_state_dict(torch.load(run_dir / "model.pt"))
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    expected = _logits(ours, tokens)
    hf = lora(base, "export_weights=true", "export_format=hf")
    assert fit(compose(hf), output_dir=str(tmp_path / "peft"))["status"] == "completed"
    adapted = peft.PeftModel.from_pretrained(
        transformers.AutoModelForCausalLM.from_pretrained(base), tmp_path / "peft" / "model_hf"
    ).eval()
    assert (_logits(adapted, tokens) - expected).abs().max() <= 1e-5
    assert fit(compose([*hf, "export_merge=true"]), output_dir=str(tmp_path / "merged"))["status"] == "completed"
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / "model_hf").eval()
    assert (_logits(merged, tokens) - expected).abs().max() <= 1e-5


def test_an_adapter_checkpoint_holds_the_adapters_alone_resumes_exactly_and_refuses_another_base(base, tmp_path):
    from torch.distributed.checkpoint import FileSystemReader

    every = [
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=4",
        "callbacks.model_checkpoint.save_top_k=-1",
        "callbacks.model_checkpoint.filename='step{step}'",
    ]
    whole = fit(compose(lora(base, *every)), output_dir=str(tmp_path / "whole"))
    checkpoint = tmp_path / "whole" / "checkpoints" / "step4"
    keys = FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
    model_keys = [k for k in keys if k.startswith("model.")]
    assert model_keys and all(k.rpartition(".")[2] in ("lora_a", "lora_b") for k in model_keys)
    resumed = fit(compose(lora(base, *every, f"ckpt_path={checkpoint}")), output_dir=str(tmp_path / "resumed"))
    assert whole["status"] == resumed["status"] == "completed" and resumed["steps"] == 8
    assert train_losses(tmp_path / "resumed") == pytest.approx(train_losses(tmp_path / "whole")[4:], abs=1e-6)
    other = save_llama(tmp_path / "other", seed=1)
    with pytest.raises(ConfigError) as err:
        preflight(compose(lora(other, f"ckpt_path={checkpoint}")))
    [problem] = [p for p in err.value.problems if p.startswith("ckpt_path")]
    assert f"were trained on another base ({base}, fingerprint" in problem and f"this run's is {other}" in problem


def test_qlora_keeps_the_base_in_four_bits_and_trains_on_two_fsdp_ranks_as_on_one(base, tmp_path):
    from framework.config.schemas import AdapterConfig
    from framework.models import HFCausalLM
    from framework.models.lora import inject_adapters
    from framework.models.nf4 import is_nf4

    model = HFCausalLM(path=str(base))
    inject_adapters(model, AdapterConfig(r=4, quantize="nf4"), 0)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert all(is_nf4(m.weight) for n, m in linears.items() if n != "lm_head") and not is_nf4(linears["lm_head"].weight)
    qlora = lora(base, "adapter=qlora", "adapter.r=4")
    one = fit(compose([*qlora, "strategy=single"]), output_dir=str(tmp_path / "one"))
    two = fit(compose([*qlora, "strategy=fsdp", "trainer.devices=2"]), output_dir=str(tmp_path / "two"))
    assert one["status"] == two["status"] == "completed"
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "one"), rel=1e-5)
    with pytest.raises(ConfigError) as err:
        preflight(compose([*qlora, "strategy=tp", "trainer.devices=2"]))
    assert any(
        p.startswith("adapter.quantize: nf4 (QLoRA) runs with strategy single or fsdp") for p in err.value.problems
    )


def test_adapters_killed_on_two_fsdp_ranks_resume_on_one_with_the_uninterrupted_losses(base, tmp_path):
    every = ["callbacks=model_checkpoint", "callbacks.model_checkpoint.monitor=null"]
    every += ["callbacks.model_checkpoint.every_n_train_steps=3"]
    whole = fit(compose(lora(base, *every, "strategy=single")), output_dir=str(tmp_path / "whole"))
    kill = [
        "+callbacks.kill._target_=tests.helpers.probes.SignalAt",
        "+callbacks.kill.step=4",
        "+callbacks.kill.signal=SIGKILL",
        "+callbacks.kill.rank=1",
    ]
    with pytest.raises(RuntimeError, match="rank 1 failed: killed by SIGKILL"):
        fit(
            compose(lora(base, *every, "strategy=fsdp", "trainer.devices=2", *kill)),
            output_dir=str(tmp_path / "killed"),
        )
    last = tmp_path / "killed" / "checkpoints" / "last"
    resumed = fit(
        compose(lora(base, *every, "strategy=single", f"ckpt_path={last}")), output_dir=str(tmp_path / "resumed")
    )
    assert whole["status"] == resumed["status"] == "completed" and resumed["steps"] == whole["steps"] == 8
    assert train_losses(tmp_path / "resumed") == pytest.approx(train_losses(tmp_path / "whole")[3:], abs=1e-6)


def test_instruction_data_trains_on_the_global_batchs_answers_on_two_ranks_and_in_accumulation(tmp_path):
    """Ranks and micro-batches hold different numbers of answer tokens: the loss is the mean over all
    of the global batch's, as one device computes it (a mean of their means is 3e-4 away)."""
    common = [
        "experiment=hf_lora_instructions",
        "datamodule.seq_len=48",
        "trainer.max_steps=3",
        "trainer.log_every_n_steps=1",
        "trainer.limit_val_batches=2",
        "predict=false",
        "test=false",
        "callbacks=none",
    ]
    layouts = {
        "single": [],
        "accumulated": ["datamodule.batch_size=4", "trainer.accumulate_grad_batches=2"],
        "ddp": ["strategy=ddp", "trainer.devices=2"],
    }
    runs = {name: fit(compose([*common, *more]), output_dir=str(tmp_path / name)) for name, more in layouts.items()}
    expected = train_losses(tmp_path / "single")
    assert len(expected) == 3
    for name in ("accumulated", "ddp"):
        assert train_losses(tmp_path / name) == pytest.approx(expected, rel=1e-5), name
        assert runs[name]["metrics"]["val/loss"] == pytest.approx(runs["single"]["metrics"]["val/loss"], rel=1e-5)


def test_a_pipeline_is_refused_instruction_data_before_start():
    with pytest.raises(ConfigError, match=r"strategy.pp: datamodule InstructionsDataModule masks its targets"):
        preflight(compose(["experiment=hf_lora_instructions", "~adapter", "strategy=pp", "trainer.devices=2"]))


def test_an_experiments_adapter_keys_left_by_removing_its_adapter_are_refused_or_removed_with_it():
    base = ["experiment=hf_lora_instructions", "~adapter"]
    with pytest.raises(ConfigError) as err:
        preflight(compose(base))
    [problem] = err.value.problems
    assert problem.startswith("adapter: adapter.r, adapter.alpha set, but no adapter selected")
    assert "~adapter ~adapter.r ~adapter.alpha" in problem
    assert preflight(compose([*base, "~adapter.r", "~adapter.alpha"])).config["adapter"] in (None, {})


def test_what_adapters_need_installed_is_named_before_start(monkeypatch):
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("peft", "torchao") else found(name, *a)
    )
    exported = ["experiment=hf_lora_instructions", "export_weights=true", "export_format=hf"]
    with pytest.raises(ConfigError) as err:
        preflight(compose([*exported, "adapter=qlora"]))
    assert any(p.startswith("adapter.quantize: nf4 (QLoRA) needs torchao") for p in err.value.problems)
    assert any(p.startswith("export_format: hf writes the adapters in peft's format") for p in err.value.problems)
    preflight(compose([*exported, "export_merge=true"]))  # merged: transformers alone; lora: no torchao
