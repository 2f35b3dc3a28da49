"""Generation as transformers' generate does it: greedy continuations of prompts of different lengths
(left padding, attention mask, key/value cache) equal ``generate(do_sample=False)`` on the exported
model for a tiny Llama, Qwen2 and GPT-2, and a plain loop without cache for the built-in GPT; the
same tokens on 2 ddp ranks, and seeded sampling that repeats on any world size."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from framework import compose, fit
from framework.predict import predict
from framework.tasks.generation import DecodingLayout, Sampling, decoding_layout, generate
from tests.helpers.configs import GPT_TINY
from tests.helpers.corpora import bpe_tokenizer

transformers = pytest.importorskip("transformers")

PROMPTS = ["The ", "def f(x):", "A list of the built-in", "If x"]
PREDICT = [
    "predict=true",
    "predict_format=jsonl",
    f"datamodule.predict_prompts=[{','.join(repr(p) for p in PROMPTS)}]",
    "task.max_new_tokens=16",
    "task.temperature=0",
]
FAMILIES = {
    "llama": lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(num_key_value_heads=2, max_position_embeddings=64, **_SHAPE)
    ),
    # 32,768 positions: generation pads to the batch's longest prompt, not to the model's length
    "qwen2": lambda: transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(num_key_value_heads=2, max_position_embeddings=32768, **_SHAPE)
    ),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=384, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
        )
    ),
}
_SHAPE = dict(
    vocab_size=384,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,  # the tokenizer's <|endoftext|>
)


def rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_continuations_are_transformers_generate_on_the_export(family, tokenizer, tmp_path):
    source = tmp_path / "source"
    torch.manual_seed(0)
    FAMILIES[family]().save_pretrained(source)
    shutil.copy(tokenizer, source / "tokenizer.json")
    run = [
        *(o for o in GPT_TINY if not o.startswith("model=")),
        "model=hf/causal_lm",
        f"model.path={source}",
        f"datamodule.tokenizer={source}",
        "datamodule.vocab_size=384",
        "trainer.max_steps=3",
        "test=false",
        "export_weights=true",
        "export_format=hf",
        *PREDICT,
    ]
    assert fit(compose(run), output_dir=str(tmp_path / "run"))["status"] == "completed"
    exported = tmp_path / "run" / "model_hf"
    model = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    encoded = [
        transformers.PreTrainedTokenizerFast(tokenizer_file=str(exported / "tokenizer.json"))(p)["input_ids"]
        for p in PROMPTS
    ]
    longest = max(len(e) for e in encoded)
    ids = torch.tensor([[0] * (longest - len(e)) + e for e in encoded])
    mask = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in encoded])
    assert len({len(e) for e in encoded}) == 4  # four lengths: three of them padded
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)
    expected = [_until_eos(row[longest:].tolist(), eos=0) for row in expected]
    got = rows(tmp_path / "run")
    assert [r["tokens"] for r in got] == expected
    assert [r["prompt"] for r in got] == PROMPTS
    assert len({t for r in got for t in r["tokens"]}) > 2  # not one token repeated: a real comparison
    if family == "llama":  # framework-generate on the exported directory: the same continuations
        assert generate_cli(exported, tmp_path / "generated") == [(r["prompt"], r["continuation"]) for r in got]


def generate_cli(source, output) -> list[tuple[str, str]]:
    """framework-generate's continuations of PROMPTS (16 tokens, greedy) from ``source``, as it wrote them."""
    args = [arg for p in PROMPTS for arg in ("--prompt", p)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.generate",
            str(source),
            *args,
            "--output",
            str(output),
            "task.max_new_tokens=16",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    written = [(r["prompt"], r["continuation"]) for r in rows(output)]
    assert done.stdout.splitlines() == [f"{p!r} -> {c!r}" for p, c in written]
    return written


def _until_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt")
    # windows of 40: the longest prompt (22 bytes) and 16 new tokens within the model's positions; a
    # learning rate that keeps it from learning that a space is the likeliest byte, which greedy repeats
    run = [*GPT_TINY, "datamodule.seq_len=40", "trainer.max_steps=2", "optimizer.lr=1e-6", "export_weights=true"]
    run += ["test=false", *PREDICT]
    assert fit(compose(run), output_dir=str(out))["status"] == "completed"
    return out


def trained_gpt(run_dir):
    from framework.models import GPT

    model = GPT(vocab_size=256, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64, max_seq_len=40).eval()
    model.load_state_dict(torch.load(run_dir / "model.pt"))
    return model


def test_the_builtin_gpts_cached_continuations_are_a_plain_loops(gpt_run):
    model = trained_gpt(gpt_run)
    expected = []
    for prompt in PROMPTS:  # each prompt alone, no padding, the whole sequence at every step
        tokens = torch.tensor([list(prompt.encode())])
        for _ in range(16):
            tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        expected.append(tokens[0, len(prompt.encode()) :].tolist())
    got = rows(gpt_run)
    assert [r["tokens"] for r in got] == expected
    assert len({t for r in got for t in r["tokens"]}) > 2  # not one token repeated: a real comparison
    assert [r["continuation"] for r in got] == [bytes(t).decode("utf-8", errors="replace") for t in expected]


@pytest.mark.multiprocess
def test_framework_generate_continues_prompts_from_a_run_directory(gpt_run, tmp_path):
    assert generate_cli(gpt_run, tmp_path / "generated") == [(r["prompt"], r["continuation"]) for r in rows(gpt_run)]


def test_two_ddp_ranks_generate_the_same_tokens_and_sampling_repeats(gpt_run, tmp_path):
    ckpt = str(gpt_run / "checkpoints" / "last")
    sampled = ["task.temperature=0.9", "task.top_k=40", "task.top_p=0.95", "task.seed=5"]
    greedy_single = predict(ckpt, ["strategy=single"], output_dir=str(tmp_path / "single"))
    greedy_ddp = predict(ckpt, ["strategy=ddp", "trainer.devices=2"], output_dir=str(tmp_path / "ddp"))
    assert greedy_single["status"] == greedy_ddp["status"] == "completed" and greedy_ddp["world_size"] == 2
    assert rows(tmp_path / "ddp") == rows(tmp_path / "single") == rows(gpt_run)
    one = predict(ckpt, ["strategy=single", *sampled], output_dir=str(tmp_path / "sampled_single"))
    two = predict(ckpt, ["strategy=fsdp", "trainer.devices=2", *sampled], output_dir=str(tmp_path / "sampled_fsdp"))
    assert one["status"] == two["status"] == "completed"
    assert rows(tmp_path / "sampled_fsdp") == rows(tmp_path / "sampled_single") != rows(gpt_run)


@pytest.mark.parametrize("layout", [["strategy=tp", "trainer.devices=2"], ["strategy=pp", "trainer.devices=2"]])
def test_split_models_sample_what_one_device_samples(layout, gpt_run, tmp_path):
    """Sequence parallelism's forwards padded to its degree; a pipeline's stages, each with its own cache."""
    ckpt = str(gpt_run / "checkpoints" / "last")
    sampled = ["task.temperature=0.9", "task.top_p=0.9", "task.seed=3"]
    one = predict(ckpt, ["strategy=single", *sampled], output_dir=str(tmp_path / "single"))
    split = predict(ckpt, [*layout, *sampled], output_dir=str(tmp_path / "split"))
    assert one["status"] == split["status"] == "completed" and split["world_size"] == 2
    assert rows(tmp_path / "split") == rows(tmp_path / "single") != rows(gpt_run)


def test_fillers_after_each_token_change_nothing(gpt_run):
    """Sequence parallelism's forwards of a multiple of the degree: the fillers hold no token."""
    model = trained_gpt(gpt_run)
    tokens = torch.tensor([[0, 0, 84, 104], [65, 32, 108, 105]])
    mask = tokens != 0
    plain = generate(model, tokens, mask, Sampling(10))
    with decoding_layout(DecodingLayout(multiple=3)):
        assert torch.equal(generate(model, tokens, mask, Sampling(10)), plain)
    sampled = Sampling(10, temperature=1.0, seed=1)
    first = generate(model, tokens, mask, sampled, rows=torch.tensor([7, 3]))
    # a row's draws are its own: the same row alone, by its index, draws the same tokens
    assert torch.equal(generate(model, tokens[1:], mask[1:], sampled, rows=torch.tensor([3])), first[1:])


def test_a_row_stops_at_its_end_of_sequence(gpt_run):
    model = trained_gpt(gpt_run)
    tokens = torch.tensor([[84, 104, 101, 32]])
    free = generate(model, tokens, None, Sampling(8))[0].tolist()
    stop = free[2]
    stopped = generate(model, tokens, None, Sampling(8), eos=[stop], pad=255)[0].tolist()
    cut = free.index(stop)
    assert stopped == free[: cut + 1] + [255] * (7 - cut)


def test_new_tokens_beyond_the_models_positions_are_refused_before_start_and_a_long_prompt_is_cut(gpt_run):
    from framework.config.errors import ConfigError
    from framework.job.preflight import preflight

    # model.max_seq_len follows datamodule.seq_len (32) in GPT_TINY; 64 new tokens had crashed after training
    with pytest.raises(ConfigError) as err:
        preflight(compose([*GPT_TINY, "predict=true", "task.max_new_tokens=32"]))
    assert err.value.problems == [
        "task.max_new_tokens: 32 new tokens, but the model holds 32 positions (model.max_seq_len) and a prompt "
        "needs one of them; set task.max_new_tokens=31 or less, or predict=false"
    ]
    preflight(compose([*GPT_TINY, "predict=true", "task.max_new_tokens=31"]))
    model = trained_gpt(gpt_run)  # 40 positions: a prompt of 8 and 36 new tokens keep its last 4
    tokens = torch.tensor([[84, 104, 101, 32, 97, 98, 99, 100]])
    assert torch.equal(generate(model, tokens, None, Sampling(36)), generate(model, tokens[:, -4:], None, Sampling(36)))
    with pytest.raises(ValueError, match="task.max_new_tokens: 40 new tokens, but the model holds 40 positions"):
        generate(model, tokens, None, Sampling(40))


def test_framework_generate_names_a_source_that_is_not_there(tmp_path, capsys):
    from framework.generate import main

    assert main([str(tmp_path / "run_typo"), "--prompt", "hi"]) == 2
    said = capsys.readouterr().err
    assert said == f"{tmp_path / 'run_typo'}: nothing there (a run directory, a checkpoint, a model, .gguf)\n"
    assert main(["pkg://no_such_package/model.gguf", "--prompt", "hi"]) == 2  # a package not installed
    said = capsys.readouterr().err
    assert said == "pkg://no_such_package/model.gguf: nothing there (a run directory, a checkpoint, a model, .gguf)\n"


def test_framework_generate_into_another_run_names_its_own_option(gpt_run, tmp_path, capsys):
    from framework.generate import main

    (tmp_path / "results.json").write_text("{}")  # another run's
    assert main([str(gpt_run), "--prompt", "hi", "--output", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert "choose another directory (--output <another directory>), or add overwrite=true" in said, said
    assert "fit(" not in said and "ckpt_path=last" not in said  # (the Python API's words, a resume's)


@pytest.mark.multiprocess
def test_framework_generate_reads_piped_prompts_once_and_names_a_bad_line(gpt_run, tmp_path):
    command = [sys.executable, "-m", "framework.generate", str(gpt_run), "--prompts", "/dev/stdin"]
    piped = subprocess.run(
        [*command, "--output", str(tmp_path / "piped"), "task.max_new_tokens=4"],
        input="def \nThe \n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert [r["prompt"] for r in rows(tmp_path / "piped")] == ["def ", "The "]  # those two, not the run's own
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "def "}\n{"prompt": 5}\n')
    refused = subprocess.run(
        [sys.executable, "-m", "framework.generate", str(gpt_run), "--prompts", str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"'{bad}' line 2: \"prompt\" is int 5, expected a string" in refused.stderr
    # a prompt longer than the model's 40 positions is cut, and the terminal says so (not train.log alone)
    cut = subprocess.run(
        [*command[:-2], "--prompt", "x" * 60, "--output", str(tmp_path / "cut"), "task.max_new_tokens=4"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cut.returncode == 0, cut.stderr[-3000:]
    assert "WARNING: Generation: prompts of 60 tokens and 4 new ones exceed the model's 40 positions" in cut.stderr


@pytest.mark.multiprocess
def test_framework_generate_names_a_damaged_checkpoint_and_a_bad_override_without_a_traceback(gpt_run, tmp_path):
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(gpt_run, run_dir)
    weights = max(
        (p for p in (run_dir / "checkpoints" / "last").iterdir() if p.is_file()), key=lambda p: p.stat().st_size
    )
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    command = [sys.executable, "-m", "framework.generate", "--prompt", "def "]
    damaged = subprocess.run([*command, str(run_dir)], capture_output=True, text=True, timeout=300)
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert (
        f"checkpoint '{run_dir / 'checkpoints' / 'last'}' is corrupted: the contents of {weights.name}"
        in damaged.stderr
    )
    unparsed = subprocess.run([*command, str(gpt_run), "task.max_new_tokens=["], capture_output=True, text=True)
    assert unparsed.returncode == 2 and "Traceback" not in unparsed.stderr
    assert "no viable alternative at input '['" in unparsed.stderr
