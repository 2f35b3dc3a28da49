"""A tiny Llama twice: as the framework builds it (HFCausalLM with its LoRA adapters) and as a peft model
TRL trains, with the same weights: what the tests against TRL's trainers compare (tests/tasks)."""

from __future__ import annotations

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def bytes_tokenizer():
    """A Hugging Face tokenizer of one token per byte (ids 0-255, the framework's byte tokens), with an
    end-of-sequence token 256: what TRL's trainers need to build."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    chars = {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}  # GPT-2's map
    vocab = {chars[b]: b for b in range(256)} | {"<eos>": 256}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>")


def adapted_tiny_llama(directory, vocab_size: int = 256):
    """(our adapted model, its base saved in ``directory``): adapters of r=4 on the attention, B drawn non-zero."""
    import transformers

    from framework.config.schemas import AdapterConfig
    from framework.models import HFCausalLM
    from framework.models.lora import inject_adapters

    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    ours = HFCausalLM(path=str(directory))
    inject_adapters(ours, AdapterConfig(r=4, alpha=8.0, target_modules=TARGETS), seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in ours.named_parameters():
            if name.endswith("lora_b"):
                param.copy_(torch.randn(param.shape, generator=generator))
    return ours.eval(), directory


def peft_config():
    import peft

    return peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS)


def peft_name(name: str) -> str:
    """A peft parameter's name (base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight) as ours."""
    module = name.split("base_model.model.model.")[1].split(".lora_")[0]
    return f"{module}.lora_{'a' if '.lora_A.' in name else 'b'}"


def copy_adapters(ours, theirs) -> None:
    """Our adapters into a peft model's."""
    adapters = {n: p for n, p in ours.named_parameters() if "lora_" in n}
    copied = 0
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            if ".lora_" in name:
                param.copy_(adapters[peft_name(name)])
                copied += 1
    assert copied == len(adapters)
