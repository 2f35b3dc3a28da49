"""What a prepared corpus (datamodule=tokens) says of the run it is in, before any process starts:
its token ids within the model's embedding, its tokenizer the model's, and positions for a model
whose forward takes them (``TokensDataModule.check_run``). Reads the corpus's index, never its shards."""

from __future__ import annotations

from framework.config.experiment import Experiment, Spec
from framework.config.ranges import are_ints


def data_vocabulary(data: Spec | dict):
    """``datamodule.vocab_size``, or the size of its ``tokenizer`` when it names one and no vocab_size."""
    if "vocab_size" in data or not data.get("tokenizer"):
        return data.get("vocab_size")
    from framework.data.text import Codec

    try:
        return Codec(str(data["tokenizer"])).vocab_size
    except Exception:  # noqa: BLE001 - an unreadable tokenizer is reported by the datamodule's check
        return None


def token_ids_problems(run: Experiment) -> list[str]:
    """A prepared corpus's largest token id (its index records each shard's) within the model's
    embedding: a larger one failed inside the ranks ("index out of range"), naming no file."""
    from framework.data.token_shards import max_token_id, read_index

    data = run.datamodule
    vocabulary = run.model.sizes().get("vocab_size")
    declared = data_vocabulary(data)
    if not data.get("path") or not are_ints(vocabulary) or (are_ints(declared) and declared > vocabulary):
        return []  # (a vocabulary larger than the embedding is job/cross_checks.py's check_tokens's to name)
    try:
        largest = max_token_id(read_index(str(data["path"])))
    except (OSError, ValueError):
        return []  # a missing corpus is named by the datamodule's check
    if largest is None or largest[0] < vocabulary:
        return []
    return [
        f"datamodule.path: shard {largest[1]} of {data['path']} holds token id {largest[0]}, beyond the model's "
        f"embedding of {vocabulary} tokens (model.vocab_size or its config's): a corpus of another tokenizer, or "
        "damaged; prepare it again with the model's tokenizer"
    ]


def prepared_tokenizer_problems(run: Experiment) -> list[str]:
    """A prepared corpus (``datamodule.path``) was tokenized by the tokenizer of a Hugging Face model
    that names its directory (``model.path`` holding tokenizer.json)."""
    from framework.data.token_shards import read_index, tokenizer_fingerprint
    from framework.data.tokenizer_files import tokenizer_file

    data, model = run.datamodule, run.model
    if not data.get("path") or not model.get("path") or not model.get("pretrained", True):
        return []
    try:
        theirs, ours = read_index(str(data["path"]))["tokenizer"], tokenizer_file(str(model["path"]))
        if not ours.is_file():
            return []
        fingerprint = tokenizer_fingerprint(ours)
    except (OSError, ValueError):
        return []  # a missing corpus or model is named by its own check
    if fingerprint == theirs["fingerprint"]:
        return []
    return [
        f"datamodule.path: the corpus at {data['path']} was prepared with {theirs['file'] or 'UTF-8 bytes'} "
        f"(fingerprint {theirs['fingerprint']}), not model.path's tokenizer {ours} ({fingerprint}); prepare it "
        f"again with tokenizer={model['path']}"
    ]


def document_boundaries_problems(run: Experiment) -> list[str]:
    """``datamodule.document_boundaries`` gives the model each token's position in its document: its
    forward must take ``positions`` (the built-in GPT's and a Hugging Face causal LM's do)."""
    import inspect

    if not run.datamodule.get("document_boundaries"):
        return []
    try:
        forward = inspect.signature(run.model.cls.forward).parameters
    except Exception:  # noqa: BLE001 - an unknown target is reported by the target check
        return []
    if "positions" in forward or any(p.kind is p.VAR_KEYWORD for p in forward.values()):
        return []
    return [
        f"datamodule.document_boundaries: the batches carry each token's position in its document, but "
        f"{run.model.name}.forward takes no 'positions'; set document_boundaries=false, or use "
        "model=gpt or hf/causal_lm (or give your model's forward a positions argument)"
    ]
