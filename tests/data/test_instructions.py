"""datamodule=instructions: the loss is the next-token cross-entropy over the response tokens only,
computed by hand (the prompt-prefix way) for a conversation rendered by a tokenizer's chat template,
and, packed three to a window, each example's as if it were alone; truncation never cuts a response
silently."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from framework.data.instructions import InstructionsDataModule, fit_window
from framework.models import GPT
from framework.tasks import LanguageModelingTask
from tests.helpers.corpora import bpe_tokenizer

transformers = pytest.importorskip("transformers")
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONVERSATION = [
    {"role": "user", "content": "Which module parses command lines?"},
    {"role": "assistant", "content": "argparse, of the standard library"},
]


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    """A BPE tokenizer whose directory has ChatML's template and its two special tokens."""
    from tokenizers import AddedToken, Tokenizer

    directory = tmp_path_factory.mktemp("chat")
    tokenizer = Tokenizer.from_file(str(bpe_tokenizer(tmp_path_factory.mktemp("bpe"))))
    tokenizer.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML, "eos_token": "<|im_end|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def model_for(vocab: int) -> GPT:
    torch.manual_seed(0)
    return GPT(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64, max_seq_len=128).eval()


def loss_of(data, model) -> torch.Tensor:
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    loss, _ = LanguageModelingTask().step(model, batch, "val")
    return loss


def test_a_chat_templates_conversation_is_trained_on_its_answer_alone(chat_tokenizer, tmp_path):
    rows = tmp_path / "one.jsonl"
    rows.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    data = InstructionsDataModule(
        str(rows), tokenizer=str(chat_tokenizer), seq_len=64, pack=False, batch_size=1, val_fraction=0, test_fraction=0
    )
    model = model_for(data.vocab_size)
    # by hand: the prompt-prefix way, through transformers' own rendering and tokenizer
    tok = transformers.AutoTokenizer.from_pretrained(chat_tokenizer)
    prefix = tok(tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True),
                 add_special_tokens=False)["input_ids"]  # fmt: skip
    full = tok(tok.apply_chat_template(CONVERSATION, tokenize=False), add_special_tokens=False)["input_ids"]
    assert full[: len(prefix)] == prefix and len(full) > len(prefix) + 3
    with torch.no_grad():
        logits = model(torch.tensor([full[:-1]]))[0]
        expected = F.cross_entropy(logits[len(prefix) - 1 :], torch.tensor(full[len(prefix) :]))
        assert loss_of(data, model) == pytest.approx(expected.item(), rel=1e-6)


def test_a_template_in_chat_template_jinja_renders_as_in_tokenizer_config(chat_tokenizer, tmp_path):
    """transformers >= 4.43 saves the template to chat_template.jinja, not tokenizer_config.json."""
    directory = tmp_path / "jinja"
    shutil.copytree(chat_tokenizer, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "chat_template.jinja").write_text(config.pop("chat_template"))
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    rows = tmp_path / "one.jsonl"
    rows.write_text(json.dumps({"messages": CONVERSATION}) + "\n")
    data = InstructionsDataModule(str(rows), tokenizer=str(directory), seq_len=64, val_fraction=0, test_fraction=0)
    rendered = data.renderer.render(CONVERSATION)
    assert rendered == transformers.AutoTokenizer.from_pretrained(chat_tokenizer).apply_chat_template(
        CONVERSATION, tokenize=False
    )
    assert rendered.startswith("<|im_start|>user")
    from framework.models.hf_export import replace_export  # an export carries the template along

    (tmp_path / "written").mkdir()
    replace_export(tmp_path / "written", tmp_path / "model_hf", directory)
    assert (tmp_path / "model_hf" / "chat_template.jinja").read_text().startswith("{% for m in messages %}")


def test_three_examples_packed_in_a_window_give_each_ones_loss_as_if_alone(tmp_path):
    examples = [
        {"prompt": "Name a module for JSON.", "response": "json"},
        {"prompt": "And one for dates?", "response": "datetime, with time"},
        {"messages": CONVERSATION},
    ]
    rows = tmp_path / "three.jsonl"
    rows.write_text("".join(json.dumps(e) + "\n" for e in examples))
    data = InstructionsDataModule(str(rows), seq_len=256, batch_size=1, val_fraction=0, test_fraction=0)
    model = model_for(256)
    data.setup("fit")
    assert len(data.train_set) == 1  # the three in one window
    inputs, targets, positions = data.train_set.tensors
    assert (positions[0] == 0).sum() == 4  # three examples and the padding
    total, count = 0.0, 0
    with torch.no_grad():
        for example in examples:  # each alone, unpadded: its rendered text, the loss on its answers
            alone = InstructionsDataModule(str(rows), seq_len=256, batch_size=1, val_fraction=0, test_fraction=0)
            ids, trained = alone._encoded([example])[0]
            logits = model(torch.tensor([ids]))[0]
            counted = torch.tensor(trained) != -100
            total += F.cross_entropy(logits[counted], torch.tensor(trained)[counted], reduction="sum").item()
            count += int(counted.sum())
        assert loss_of(data, model) == pytest.approx(total / count, rel=1e-5)
    # every answer's characters and its turn's end ("\n\n" of the default template), nothing of the prompts
    answers = [examples[0]["response"], examples[1]["response"], CONVERSATION[1]["content"]]
    assert count == sum(len(a) + 2 for a in answers)


def test_a_long_example_loses_its_prompt_first_and_a_cut_response_is_counted(tmp_path):
    ids, trained, cut = fit_window(list(range(10)), [False] * 6 + [True] * 4, 6)
    assert (ids, trained, cut) == ([4, 5, 6, 7, 8, 9], [False, False, True, True, True, True], "prompt")
    ids, trained, cut = fit_window(list(range(10)), [False] * 2 + [True] * 8, 6)
    assert (ids, cut) == ([2, 3, 4, 5, 6, 7], "response")
    rows = tmp_path / "long.jsonl"
    rows.write_text(
        json.dumps({"prompt": "x" * 100, "response": "y" * 10})
        + "\n"
        + json.dumps({"prompt": "a", "response": "z" * 100})
        + "\n"
    )
    data = InstructionsDataModule(str(rows), seq_len=50, val_fraction=0, test_fraction=0)
    data.setup("fit")
    assert data.counts == {"examples": 2, "truncated": 2, "responses_cut": 1}
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_framework_generate_chat_renders_each_prompt_as_the_templates_user_turn(chat_tokenizer, tmp_path):
    """``framework-generate MODEL_DIR --chat``: each prompt as a user's turn of the tokenizer's chat
    template, continued as transformers' greedy ``generate`` continues that rendering."""
    transformers = pytest.importorskip("transformers")
    from framework.generate import main

    model_dir = tmp_path / "model"
    shutil.copytree(chat_tokenizer, model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(model_dir)
    question = CONVERSATION[0]["content"]
    assert main([str(model_dir), "--chat", "--prompt", question, "--output", str(tmp_path / "out"),
                 "task.max_new_tokens=6"]) == 0  # fmt: skip
    [row] = [json.loads(line) for line in (tmp_path / "out" / "predictions.jsonl").read_text().splitlines()]
    rendered = tokenizer.apply_chat_template([CONVERSATION[0]], add_generation_prompt=True, return_tensors="pt")
    ids = rendered["input_ids"] if isinstance(rendered, dict) or hasattr(rendered, "keys") else rendered
    expected = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0)[0, ids.shape[1] :]
    assert row["prompt"] == question
    assert row["tokens"] == expected.tolist()[: len(row["tokens"])] and row["tokens"]


def test_a_tokenizer_without_a_chat_template_is_said_in_a_warning(tmp_path, caplog):
    """framework-generate --chat on such a model had rendered '### user:' with nothing on the terminal."""
    from framework.data.chat import Renderer

    tokenizer = bpe_tokenizer(tmp_path)
    Renderer(str(tokenizer))
    [warning] = [r for r in caplog.records if "chat template" in r.getMessage()]
    assert warning.levelname == "WARNING" and warning.getMessage().startswith(
        f"The tokenizer {tokenizer} has no chat template: conversations are rendered by '### {{role}}"
    )
