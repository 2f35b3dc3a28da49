"""Tokenizer files: a ``tokenizers`` JSON file, or a model directory (``pkg://`` too, or a GGUF file's
converted directory) that holds one, loaded with its own padding and truncation off. No torch here:
``framework-prepare-data``'s workers load tokenizers through it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from framework.config.gguf_files import GGUFError
from framework.config.optional_modules import is_missing, not_installed
from framework.config.package_paths import model_directory


def tokenizer_file(tokenizer: str) -> Path:
    """A ``tokenizers`` JSON file, or a model directory holding its ``tokenizer.json`` (``pkg://`` too; a
    GGUF file's converted directory)."""
    return TokenizerFile(tokenizer).path


def load_tokenizer(tokenizer: str):
    """The tokenizer, its own padding and truncation off (the datamodule cuts and pads)."""
    return TokenizerFile(tokenizer).load()


class TokenizerFile:
    """A config's ``tokenizer``: a ``tokenizers`` JSON file, or a model directory holding its
    ``tokenizer.json`` (``pkg://`` too; a GGUF file's converted directory); null: UTF-8 bytes."""

    def __init__(self, name: Optional[str]):
        self.name = name

    @property
    def path(self) -> Path:
        path = model_directory(self.name)
        return path / "tokenizer.json" if path.is_dir() else path

    def load(self):
        """The tokenizer, its own padding and truncation off (the datamodule cuts and pads)."""
        from tokenizers import Tokenizer

        loaded = Tokenizer.from_file(str(self.path))
        loaded.no_padding()
        loaded.no_truncation()
        return loaded

    @property
    def vocab_size(self) -> int:
        """Its count of tokens (256 for bytes)."""
        return self.load().get_vocab_size() if self.name else 256

    def problems(self) -> list[str]:
        """``tokenizer`` names a tokenizers JSON file, or a directory that holds one (null: bytes); keyed
        relative to the datamodule."""
        if self.name and is_missing("tokenizers"):
            return [not_installed("tokenizer", "tokenizers", "reading a tokenizer file")]
        try:
            found = self.path.is_file() if self.name else True
        except (FileNotFoundError, GGUFError) as err:
            return [f"tokenizer: {err}"]
        return (
            []
            if found
            else [
                f"tokenizer: no tokenizer file at '{self.name}' (a tokenizers JSON file, a model "
                "directory holding tokenizer.json, or a GGUF file; null: bytes)"
            ]
        )


def data_vocabulary(data):
    """``datamodule.vocab_size`` (``data``: its node), or the size of its ``tokenizer`` when it names one
    and no vocab_size."""
    if "vocab_size" in data or not data.get("tokenizer"):
        return data.get("vocab_size")
    try:
        return TokenizerFile(str(data["tokenizer"])).vocab_size
    except Exception:  # noqa: BLE001 - an unreadable tokenizer is reported by the datamodule's check
        return None


def _json(path: Path) -> dict:
    import json

    try:
        loaded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _ids(value) -> list[int]:
    """A config's token id or list of ids, as a list (a bool or anything else: none)."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def special_tokens(tokenizer: Optional[str], loaded=None) -> dict:
    """The ids a model's directory names as its end of sequence (``eos``, a list), padding (``pad``)
    and beginning (``bos``), as ``transformers``' generate reads them: ``generation_config.json``, then
    ``config.json``, then the tokens ``tokenizer_config.json`` names (looked up in ``loaded``, the
    tokenizer); and what its tokenizer alone says (``tokenizer_bos``, ``tokenizer_eos``: the tokens
    ``tokenizer_config.json`` names). For a tokenizer file, the files beside it say."""
    if not tokenizer:
        return {"eos": [], "pad": None, "bos": None, "tokenizer_bos": None, "tokenizer_eos": None}
    path = model_directory(tokenizer)
    directory = path if path.is_dir() else path.parent
    generation, config = _json(directory / "generation_config.json"), _json(directory / "config.json")
    named = _json(directory / "tokenizer_config.json")

    def by_name(key: str) -> list[int]:
        value = named.get(key)
        text = value.get("content") if isinstance(value, dict) else value
        found = loaded.token_to_id(text) if loaded is not None and isinstance(text, str) else None
        return [] if found is None else [found]

    def first(key: str, name: str) -> list[int]:
        for source in (generation, config):
            if _ids(source.get(key)):
                return _ids(source.get(key))
        return by_name(name)

    pad, bos = first("pad_token_id", "pad_token"), first("bos_token_id", "bos_token")
    named_bos, named_eos = by_name("bos_token"), by_name("eos_token")  # what transformers' tokenizer says
    return {
        "eos": first("eos_token_id", "eos_token"),
        "pad": pad[0] if pad else None,
        "bos": bos[0] if bos else None,
        "tokenizer_bos": named_bos[0] if named_bos else None,
        "tokenizer_eos": named_eos[0] if named_eos else None,
    }
