"""Checks across groups, before any process starts, each named for what it relates: what one group's
values say of another's (the data's tokens against the model's embedding and positions, the data's
kinds against the model's and the task's, the run's stages against the datamodule, the strategy against
the model and the process that starts its ranks, the init's submodule names against the model), the
checkpoints a run reads against trust_checkpoint, and the directories a run will write to. What one
component says of its own config or of the run it is in is its own answer (its ``check_config`` and
``check_run``; a strategy's methods): job/preflight.py collects them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from framework.config.experiment import Experiment, Spec
from framework.config.optional_modules import install_hint, is_missing, not_installed
from framework.config.param_groups import ParamGroups
from framework.config.ranges import are_ints
from framework.config.writable import unwritable
from framework.data.tokenizer_files import data_vocabulary
from framework.engine.checkpoint_files import CkptPath, resolve_ckpt_path
from framework.engine.safe_load import scan_checkpoint
from framework.engine.transfer_learning import InitialWeights
from framework.job.experiment import ResolvedExperiment

log = logging.getLogger(__name__)


def check_tokens(run: Experiment) -> list[str]:
    """A model's embedding holds every token id the data has, and its positions every token of a
    window (``model.vocab_size`` / ``max_seq_len``, or what a Hugging Face model's config says,
    against ``datamodule.vocab_size`` or its tokenizer's / ``seq_len``): a larger id or a longer
    window fails inside the ranks."""
    model, data = run.model, run.datamodule
    sizes, problems = model.sizes(), []
    ours, theirs = sizes.get("vocab_size"), data_vocabulary(data)
    if are_ints(theirs) and data.get("tokenizer") and data_vocabulary({"tokenizer": data["tokenizer"]}) != theirs:
        theirs = None  # a vocab_size that is not its tokenizer's: the datamodule's own check names it
    key = "model.vocab_size" if "vocab_size" in model else "model (its config's vocab_size)"
    if are_ints(ours, theirs) and ours < theirs:
        problems.append(
            f"{key}: {ours}, but the data's token ids run to {theirs - 1} (datamodule's vocabulary: "
            f"{theirs}); set model.vocab_size={theirs}, or leave it at ${{datamodule.vocab_size}}"
            if "vocab_size" in model
            else f"{key}: an embedding of {ours} tokens, but the tokenizer datamodule.tokenizer has {theirs}: "
            "give the model's own tokenizer (its directory)"
        )
    longest, window = sizes.get("max_seq_len"), data.get("seq_len")
    if are_ints(longest, window) and window > longest and run.windowed:
        held, fix = (
            ("model.max_seq_len", f"set model.max_seq_len={window} or datamodule.seq_len={longest}")
            if "max_seq_len" in model
            else ("its config's max_position_embeddings", f"set datamodule.seq_len={longest} or less")
        )
        problems.append(
            f"datamodule.seq_len: windows of {window} tokens, but the model holds positions for "
            f"{longest} ({held}); {fix}"
        )
    return problems


def _manifest(run: Experiment) -> tuple[Path, dict]:
    """The checkpoint ``ckpt_path`` names (relative to the run's directory) and its manifest."""
    import json

    from framework.engine.checkpoint_files import MANIFEST, resolve_ckpt_path

    path = resolve_ckpt_path(str(run.ckpt_path), str(run.output_dir or "."))
    return path, json.loads((path / MANIFEST).read_text())


def check_resumed_corpus(run: Experiment) -> list[str]:
    """A resume (``ckpt_path`` with ``train``) on the prepared corpus its checkpoint trained on, or on
    that corpus grown by appending: any other change is named before start (the checkpoint's
    manifest records the corpus's shards and checksums)."""
    from framework.data.token_shards import corpus_change, identity, read_index

    data = run.datamodule
    if not run.ckpt_path or not data.get("path") or not run.train:
        return []
    try:
        path, manifest = _manifest(run)
        saved = manifest.get("datamodule") or {}
        now = identity(read_index(str(data["path"])))
    except (OSError, ValueError):
        return []  # a missing checkpoint or corpus is named by its own check
    change = corpus_change(saved["identity"], now) if "identity" in saved else None
    if change in (None, "grown"):
        return []
    return [
        f"datamodule.path: the corpus at {data['path']} changed since the checkpoint {path} was taken: {change}; "
        "resume on the corpus it trained on, or start a new run from its weights (init.weights=<checkpoint>)"
    ]


def check_adapter(run: ResolvedExperiment) -> list[str]:
    """``adapter=lora|qlora``: a strategy that runs adapters (QLoRA: one that holds 4-bit weights; DoRA:
    one that does not split the adapted weights), and target modules that name linear layers of the
    model (built on the meta device)."""
    settings = run.adapter
    if settings is None or not run.model.given or run.layout is None:
        return []
    from framework.strategies import adapter_strategies

    problems = run.layout.strategy.adapter_problems(run.layout.options, run.layout.topology, settings)
    # (what runs them: the built-in ones by name, a class of yours by declaring it)
    if not run.layout.strategy.runs_adapters:
        problems = [
            f"{problems[0]}; choose one of {', '.join(adapter_strategies())}, or a class of your own that runs them"
        ]
    model, layers = run.meta_model, run.adapted_layers
    if model is not None and not problems and not layers:
        linears = [n for n, m in model.named_modules() if type(m).__name__ == "Linear"]
        problems.append(
            f"adapter.target_modules: {settings.target_modules or 'the model default'} names no linear layer of "
            f"{type(model).__name__} (its linear layers: {', '.join(linears[:6])}{' ...' if len(linears) > 6 else ''})"
        )
    warning = settings.rank_warning(layers or {})
    if warning:
        log.warning(warning)
    return problems + settings.rank_problems(layers or {})


def check_adapter_packages(run: Experiment) -> list[str]:
    """What adapters need installed beyond the framework, named before start rather than by an import
    error after training: torchao for QLoRA's 4-bit base, peft for the adapters' own export."""
    if run.adapter is None:
        return []
    problems = []
    if run.adapter.quantize and is_missing("torchao"):
        problems.append(
            f"adapter.quantize: {run.adapter.quantize} (QLoRA) needs torchao, which is not installed; "
            + install_hint("torchao")
        )
    exports_adapters = run.export_weights and run.export_format == "hf" and not run.export_merge
    if exports_adapters and is_missing("peft"):
        problems.append(
            f"export_format: hf writes the adapters in peft's format, and peft is not installed; "
            f"{install_hint('peft')}, or set export_merge=true (the merged model, for transformers alone)"
        )
    return problems


def check_adapter_base(run: Experiment) -> list[str]:
    """An adapter checkpoint (``ckpt_path``) continues or is evaluated with the adapter it trained (its
    manifest records the settings: it holds the adapters alone, not the base) and on the base it
    trained on (the manifest records the base's fingerprint: a saved model's weight files, or the
    config and seed that draw it); a whole model's checkpoint, without one."""
    from framework.models.lora import base_fingerprint

    model = run.model
    if not run.ckpt_path or not model.given:
        return []
    try:
        path, manifest = _manifest(run)
    except (OSError, ValueError, KeyError):
        return []  # a missing checkpoint is named by its own check
    problems = _adapter_settings_problems(run, path, manifest)
    saved = manifest.get("adapter_base")
    if problems or saved is None or run.adapter is None or (run.seed is None and not model.get("path")):
        return problems  # (or no base recorded; or one drawn from a seed this config does not fix)
    try:
        now = base_fingerprint(model.node, run.seed, run.init.weights)
    except (OSError, ValueError, KeyError):
        return []  # a missing model is named by its own check
    if now["fingerprint"] == saved["fingerprint"]:
        return []
    return [
        f"ckpt_path: the adapters of {path} were trained on another base ({saved['source']}, fingerprint "
        f"{saved['fingerprint']}); this run's is {now['source']} ({now['fingerprint']}): name the base they "
        "adapt (model.path)"
    ]


# What shapes an adapter's tensors (alpha and dropout change none: a resume may change them).
_ADAPTER_SHAPES = ("r", "use_dora", "target_modules")


def _adapter_settings_problems(run: Experiment, path: Path, manifest: dict) -> list[str]:
    """The run's adapter against the one a checkpoint trained (``manifest``'s): loading the one into the
    other failed as "another model or optimizer", not saying which adapter it needs."""
    adapted, saved = "adapter_base" in manifest, manifest.get("adapter")
    if not adapted and run.adapter is not None:
        return [
            f"ckpt_path: {path} holds a whole model's weights, without adapters, and this run adds adapters "
            f"(adapter.r={run.adapter.r}); load it without them (~adapter on the command line)"
        ]
    if not adapted:
        return []
    selection = _adapter_selection(saved) if saved else "adapter=lora"
    if run.adapter is None:
        return [
            f"ckpt_path: {path} holds adapters alone, not the base's weights: it loads into the model with its "
            f"adapter ({selection}{'' if saved else ', with the settings it trained with'}), and this run has none "
            "(adapter: null); run it with that adapter (a resume in the run's own directory has it unless ~adapter "
            "removes it), or leave ckpt_path out to train a model without adapters"
        ]
    differ = [k for k in _ADAPTER_SHAPES if saved and k in saved and saved[k] != getattr(run.adapter, k)]
    if not differ:
        return []
    ours = " ".join(f"adapter.{k}={_shown(getattr(run.adapter, k))}" for k in differ)
    return [f"ckpt_path: {path} holds the adapters of {selection}, and this run's are {ours}: load it with its own"]


def _adapter_selection(saved: dict) -> str:
    """The command line that selects the adapter a checkpoint's manifest records (its option, and the
    keys where it differs from that option's defaults)."""
    from framework.config.schemas import AdapterConfig

    defaults = AdapterConfig(quantize=saved.get("quantize"))
    keys = [
        f"adapter.{k}={_shown(v)}"
        for k, v in saved.items()
        if k != "quantize" and hasattr(defaults, k) and v != getattr(defaults, k)
    ]
    return " ".join([f"adapter={'qlora' if saved.get('quantize') else 'lora'}", *keys])


def _shown(value) -> str:
    """A value as the command line writes it (``[wq,wk]``, ``true``, ``null``)."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_shown, value)) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_compile_blocks(run: ResolvedExperiment) -> list[str]:
    """``trainer.compile=blocks`` runs with data parallelism, FSDP and pipelines; with tensor
    parallelism, this torch's compiled blocks hand DTensor's backward plain gradients on the CPU
    ("'Tensor' object has no attribute '_local_tensor'", seen with and without sequence
    parallelism): refused before start rather than failing in the ranks. A model without blocks
    is refused before start too."""
    from framework.engine.compiling import blocks_problem

    if run.trainer.compile != "blocks" or run.layout is None:
        return []  # (an invalid layout: StrategyNode names it)
    if run.layout.topology.tp > 1:
        return [
            "trainer.compile: blocks is not supported with tensor parallelism (strategy=tp, fsdp_tp, "
            "strategy.tp > 1): torch's compiled blocks lose DTensor gradients "
            "in backward; use trainer.compile=false there, or compile=blocks with ddp, fsdp, hsdp or pp"
        ]
    model = run.meta_model
    problem = blocks_problem(model) if model is not None else None
    return [problem] if problem else []


def check_validation_interval(run: Experiment) -> list[str]:
    """An int ``trainer.val_check_interval`` within an epoch, for a datamodule that knows its training
    samples before start from its files' headers (``train_samples``: datamodule=tokens from its
    index); the others' epochs are known once the ranks load the data, which checks it before the
    first step (engine/trainer.py)."""
    from framework.config.intervals import validation_interval_problem
    from framework.engine.data_loaders import limit_batches

    data, trainer = run.datamodule, run.trainer
    batch, limit, interval = data.get("batch_size"), trainer.limit_train_batches, trainer.val_check_interval
    if (
        not run.train
        or trainer.fast_dev_run
        or not are_ints(interval)
        or trainer.limit_val_batches == 0
        or not are_ints(batch)
        or batch < 1
        or isinstance(limit, bool)
    ):
        return []
    if are_ints(limit) and validation_interval_problem(interval, limit):
        return []  # named against trainer.limit_train_batches by the trainer's own check
    samples = _counted(data, "train_samples")
    if not are_ints(samples):
        return []
    batches = limit_batches(samples // batch, limit)
    problem = validation_interval_problem(
        interval, batches, f" ({samples:,} training samples in global batches of {batch})"
    )
    return [problem] if problem else []


def check_global_batch(run: Experiment) -> list[str]:
    """The global batch (``datamodule.batch_size``) within the training set, for a datamodule that counts it
    before start (``train_samples``; else ``train_rows``, which bound the windows rows are packed into): the
    ranks refuse a larger one too (engine/data_loaders.py), but only once the model is built."""
    data, batch = run.datamodule, run.datamodule.get("batch_size")
    if not run.train or not are_ints(batch) or batch < 1:
        return []
    samples = _counted(data, "train_samples")
    rows = _counted(data, "train_rows") if samples is None else None
    count = samples if are_ints(samples) else rows
    if not are_ints(count) or batch <= count:
        return []
    held = [f"datamodule.{k}={data[k]}" for k in ("val_fraction", "test_fraction") if k in data]
    after = f" after {' and '.join(held)}" if held else ""
    unit = ("sample" if count is samples else "row") + ("s" if count != 1 else "")
    packed = "" if count is samples else ", packed into at most as many windows"
    what = f"{count} {unit}{after}{packed}"
    return [
        f"datamodule.batch_size: the global batch {batch} is larger than the training set ({what}); "
        f"set datamodule.batch_size={count} or less"
    ]


def _counted(data: Spec, counter: str) -> Optional[int]:
    """What the datamodule's class counts of its data before start (``train_samples``, ``train_rows``), or None."""
    count = data.declared(counter)
    try:
        return count(**data.options) if callable(count) else None
    except (OSError, ValueError, TypeError, KeyError):  # data that does not read: its own check names it
        return None


def check_export_format(run: Experiment) -> list[str]:
    """``export_format=hf`` needs a model that knows its Hugging Face form (``save_hf``)."""
    if run.export_format != "hf" or run.model.cls is None or callable(run.model.declared("save_hf")):
        return []  # (an unknown target is reported by the target check)
    return [
        f"export_format: hf writes a directory transformers loads, from a Hugging Face model "
        f"(model=hf/causal_lm, hf/sequence_classification); {run.model.name} is "
        "not one: choose export_format=pt or safetensors"
    ]


def check_predict_on_start(run: Experiment) -> list[str]:
    """``predict_on_start`` continues the prompts with the weights training starts from, beside the
    trained weights' continuations: it needs a run that trains and predicts, into predictions.jsonl."""
    if not run.predict_on_start:
        return []
    missing = [f"{key}={value}" for key, value in (("train", run.train), ("predict", run.predict)) if not value]
    if run.predict_format != "jsonl":
        missing.append(f"predict_format={run.predict_format}")
    if not missing:
        return []
    return [
        f"predict_on_start: true puts the prompts' continuations before training beside those after it, in "
        f"predictions.jsonl; this run has {', '.join(missing)}: set train=true predict=true predict_format=jsonl, "
        "or predict_on_start=false"
    ]


def check_export_directory(run: Experiment) -> list[str]:
    """``export_format=hf`` writes ``model_hf/`` of the run's directory: never through a link, nor over a
    file of the user's (models/hf_export.py)."""
    if not (run.export_weights and run.export_format == "hf" and run.output_dir):
        return []
    from framework.models.hf_export import ExportDirectory

    return ExportDirectory(Path(str(run.output_dir)) / "model_hf").problems()


# What each kind of batch and output is called in a message, and the option that gives (or scores) it.
_KINDS = {
    "features": ("features (float tensors)", "model=mlp or cnn"),
    "token ids": ("token ids", "datamodule=text, tokens or text_classification"),
    "classes": ("one class per sample", "task=classification"),
    "next tokens": ("windows of tokens", "task=language_modeling"),
    "logits per sample": ("logits per sample", "task=classification"),
    "logits per token": ("logits per token", "task=language_modeling"),
}
# (datamodules, models) of each kind of inputs
_OPTIONS = {
    "features": ("datamodule=digits, synthetic, mnist or cifar10", "model=mlp or cnn"),
    "token ids": (
        "datamodule=text, tokens, instructions, preferences or text_classification",
        "model=gpt or hf/causal_lm",
    ),
}
# the models that give an output kind
_MODELS = {
    "logits per sample": "model=mlp, cnn or hf/sequence_classification",
    "logits per token": "model=gpt or hf/causal_lm",
}


def _kind(spec: Spec, attribute: str):
    """The kind of inputs, targets or outputs the class declares of itself (``inputs``, ...), or None."""
    value = spec.declared(attribute)
    return value if value in _KINDS else None


def check_data_kinds(run: Experiment) -> list[str]:
    """The data's inputs are what the model takes, its targets what the task trains on, and the model's
    outputs what the task scores, as each class declares (``inputs``, ``targets``, ``outputs``,
    ``model_outputs``): a model of token ids on images, or a classification of windows of tokens,
    fails inside the ranks. A language-modelling task's own check names its mismatches
    (``check_task_fits_data``)."""
    problems = []
    takes, gives = _kind(run.model, "inputs"), _kind(run.datamodule, "inputs")
    if takes and gives and takes != gives:
        problems.append(
            f"model._target_: {run.model.name} takes {_KINDS[takes][0]}, but datamodule "
            f"{run.datamodule.name} gives {_KINDS[gives][0]}; choose a datamodule of {takes} "
            f"({_OPTIONS[takes][0]}) or a model of {gives} ({_OPTIONS[gives][1]})"
        )
    if _kind(run.task, "targets") == "next tokens":
        return problems
    trains, labels = _kind(run.task, "targets"), _kind(run.datamodule, "targets")
    if trains and labels and trains != labels:
        problems.append(
            f"task._target_: {run.task.name} trains on {_KINDS[trains][0]}, but datamodule "
            f"{run.datamodule.name} gives {_KINDS[labels][0]}; choose {_KINDS[labels][1]}"
        )
    needs, outputs = _kind(run.task, "model_outputs"), _kind(run.model, "outputs")
    if needs and outputs and needs != outputs:
        problems.append(
            f"task._target_: {run.task.name} scores {needs}, but model {run.model.name} "
            f"gives {outputs}; choose {_MODELS[needs]}, or {_KINDS[outputs][1]}"
        )
    return problems


def check_masked_targets(run: ResolvedExperiment) -> list[str]:
    """A datamodule that masks a varying number of targets (``masks_targets``, instruction data)
    trains on the mean over the global batch's counted targets, which a pipeline's schedule (a mean
    of its micro-batches' means) does not compute."""
    masks = run.datamodule.declared("masks_targets", False)
    if not masks or run.layout is None or run.layout.topology.pp == 1 or not run.train:
        return []
    return [
        f"strategy.pp: datamodule {run.datamodule.name} masks its targets (the loss is a mean "
        "over the global batch's response tokens), which a pipeline's schedule does not compute; "
        "use a strategy without strategy.pp (ddp, fsdp, tp, fsdp_tp)"
    ]


def check_harness(run: Experiment) -> list[str]:
    """``harness.tasks`` name tasks lm-eval finds (shipped, in ``harness.include_path``, or its own),
    for a language model (logits per token) and a datamodule that knows its tokenizer."""
    names, include = run.harness.tasks, run.harness.include_path
    if not names or not isinstance(names, list):
        return []
    if is_missing("lm_eval"):
        return [not_installed("harness.tasks", "lm_eval", "EleutherAI's lm-evaluation-harness")]
    problems = []
    if include and not Path(str(include)).is_dir():
        problems.append(f"harness.include_path: '{include}' is not a directory (of lm-eval task YAMLs)")
    outputs = _kind(run.model, "outputs")
    if outputs and outputs != "logits per token":
        problems.append(
            f"harness.tasks: lm-evaluation-harness scores a language model (logits per token); model "
            f"{run.model.name} gives {outputs}; choose model=gpt or hf/causal_lm"
        )
    if run.datamodule.declared("targets") not in ("next tokens", "preference pairs"):
        problems.append(
            f"harness.tasks: scoring encodes the questions with the datamodule's tokenizer; datamodule "
            f"{run.datamodule.name} has none: choose datamodule=text or tokens"
        )
    if problems:
        return problems
    from framework.rank.harness import SHIPPED_TASKS, HarnessTasks, unknown_tasks

    shipped = ", ".join(sorted(p.stem for p in SHIPPED_TASKS.glob("*.yaml")))
    unknown = [
        f"harness.tasks: lm-eval knows no task '{name}'{f'; did you mean {close}?' if close else ''} (shipped: "
        f"{shipped}; your own: harness.include_path=<a directory of task YAMLs>)"
        for name, close in unknown_tasks([str(n) for n in names], str(include) if include else None)
    ]
    if unknown:  # (a task YAML of the user's that does not parse is one lm-eval does not know)
        return unknown + (HarnessTasks(run.harness).include_problems() if include else [])
    return HarnessTasks(run.harness).problems(_harness_codec(run.datamodule), run.model.sizes().get("max_seq_len"))


def _harness_codec(data: Spec):
    """The tokenizer the datamodule will encode the harness's questions with (framework/data/text.py's
    Codec: its ``tokenizer``, a prepared corpus's own, or bytes)."""
    from framework.data.text import Codec

    declared = data.declared("text_tokenizer")  # (datamodule=tokens: the tokenizer its corpus was prepared with)
    try:
        tokenizer = declared(**data.options) if callable(declared) else data.get("tokenizer")
    except (OSError, ValueError, KeyError, TypeError):  # (a corpus that does not read: its own check names it)
        return None
    return Codec(str(tokenizer) if tokenizer else None)


def check_init_names(run: ResolvedExperiment) -> list[str]:
    """``init.reset`` / ``init.freeze`` name submodules of the model (built on the meta device)."""
    named = {key: [str(n) for n in getattr(run.init, key)] for key in ("reset", "freeze") if getattr(run.init, key)}
    model = run.meta_model if named else None
    if model is None:
        return []
    modules = {name for name, _ in model.named_modules() if name}
    top = ", ".join(name for name, _ in model.named_children())
    return [
        f"init.{key}: the model has no submodule {name!r} (top-level submodules: {top})"
        for key, names in named.items()
        for name in names
        if name not in modules
    ]


def check_writable(run: Experiment) -> list[str]:
    """The run's directory and the checkpoint callback's can be created and written."""
    places = [("output_dir", run.output_dir)]
    for spec in run.callbacks.values():
        if str(spec.target or "").endswith("ModelCheckpoint"):
            places.append((f"{spec.key}.dirpath", spec.get("dirpath")))
    return [problem for key, path in places if path for problem in [unwritable(key, Path(str(path)))] if problem]


def check_test(run: Experiment) -> list[str]:
    """``test=true`` (the default, and framework-evaluate's) needs a datamodule with ``test_dataloader()``."""
    data = run.datamodule
    if not run.test or not data.is_class or callable(data.declared("test_dataloader")):
        return []  # (a factory's product is unknown before it runs)
    target = data.target
    other = " or set test=false" if run.train else ""
    return [
        f"test: true, but datamodule._target_ {target} has no test_dataloader(); add one (it returns the "
        f"DataLoader of the test samples, or None), choose a datamodule that has one{other}"
    ]


def check_predict(run: Experiment) -> list[str]:
    """``predict=true`` needs a datamodule with ``predict_dataloader()``."""
    data = run.datamodule
    if not run.predict or not data.is_class:
        return []
    if callable(data.declared("predict_dataloader")):
        return _records_problems(run)
    target = data.target
    other = " or set predict=false" if run.train or run.test else ""
    return [
        f"predict: true, but datamodule._target_ {target} has no predict_dataloader(); add one (it returns "
        f"the DataLoader of the samples to predict), choose a datamodule that has one{other}"
    ]


def _records_problems(run: Experiment) -> list[str]:
    """``predict_format=jsonl`` of a datamodule with ``prediction_records`` (a text's prompts and
    their continuations) needs the token ids a task's ``predict_step`` generates, not the model's
    outputs (logits: every continuation would be empty)."""
    records = callable(run.datamodule.declared("prediction_records"))
    if (
        run.predict_format != "jsonl"
        or not records
        or run.task.cls is None
        or callable(run.task.declared("predict_step"))
    ):
        return []  # (a task that does not import is reported by the config checks)
    return [
        f"predict_format: jsonl writes each prompt's continuation, generated by the task's predict_step; "
        f"task._target_ {run.task.target} has none (its predictions would be the model's logits): give it a "
        "predict_step that returns token ids, choose task=language_modeling, or predict_format=pt or csv"
    ]


def check_model_names(run: ResolvedExperiment) -> list[str]:
    """What names the model's parameters and submodule classes: ``optimizer.param_groups`` (each
    entry must take some parameter), ``trainer.activation_checkpointing`` and
    ``strategy.wrap_classes`` (each class must be one of a submodule). The model is built on the
    meta device (no memory, no weights read)."""
    specs = run.optimizer.get("param_groups")
    specs = None if not specs or ParamGroups.problems(specs, None) else specs
    checkpointed = run.trainer.activation_checkpointing
    checkpointed = checkpointed if isinstance(checkpointed, list) and checkpointed else None
    wrapped = run.strategy.get("wrap_classes")
    wrapped = wrapped if isinstance(wrapped, list) and wrapped else None
    if not (specs or checkpointed or wrapped):
        return []
    from framework.engine.activation_checkpointing import CheckpointedClasses

    model = run.meta_model  # only a run that names parameters or classes pays for it before its ranks start
    if model is None:
        return []
    problems = ParamGroups(specs).match_problems([n for n, _ in model.named_parameters()]) if specs else []
    if checkpointed:
        classes = CheckpointedClasses(tuple(map(str, checkpointed)))
        problems += classes.problems(model) + (classes.compiled_problems(model) if run.trainer.compile else [])
    return problems + (
        CheckpointedClasses(tuple(map(str, wrapped)), "strategy.wrap_classes").problems(model) if wrapped else []
    )


def check_strategy_on_model(run: ResolvedExperiment) -> list[str]:
    """What the strategy says of the model itself (a tensor-parallel plan and the sizes it splits),
    on the model built on the meta device; only for a strategy that checks models."""
    from framework.strategies import Strategy

    if run.layout is None or run.strategy_problems:
        return []  # an invalid strategy, layout or option (strategy.microbatches=abc): StrategyNode names it
    cls = run.layout.strategy
    if cls.model_problems.__func__ is Strategy.model_problems.__func__ or run.meta_model is None:
        return []
    return cls.model_problems(run.layout.options, run.layout.topology, run.meta_model, run)


def check_rank_start(run: ResolvedExperiment) -> list[str]:
    """Local ranks that can start from here: classes defined in a notebook reach forked ranks only,
    and a fork cannot use CUDA once this process initialised it, nor autograd once its threads started."""
    import torch

    from framework.config.environment import detect_environment
    from framework.launch.main_module import autograd_survives_fork, forks_ranks, interactive_main, needs_main

    if run.layout is None:  # an invalid strategy or layout: StrategyNode names it
        return []
    if run.layout.topology.processes_per_node < 2 or detect_environment() is not None:
        return []
    name, start = f"strategy={run.layout.name}", run.layout.start
    if start == "spawn" and needs_main(run) and interactive_main():
        return [
            f"{name}: starts fresh interpreters, which cannot see the classes defined in this notebook or "
            "session (_target_: __main__...); use strategy=ddp_notebook (or ddp, fsdp, ...: they fork their "
            "ranks from this process here), or move those classes into a module file"
        ]
    if forks_ranks(run, start) and torch.cuda.is_available() and torch.cuda.is_initialized():
        return [
            f"{name}: its ranks are forks of this process, which has initialised CUDA already (a CUDA "
            "tensor or call before fit), and a forked process cannot use CUDA; restart the kernel and call "
            "fit before anything touches CUDA, or move the classes of _target_: __main__... into a module "
            "file and use strategy=ddp"
        ]
    if forks_ranks(run, start) and not autograd_survives_fork():
        return [
            f"{name}: its ranks are forks of this process, whose autograd has started threads already (a "
            "compiled model's backward ran here: trainer.compile), and a forked process cannot run backward "
            "then; restart the kernel and run this fit before any compiled one, or move the classes of "
            "_target_: __main__... into a module file and use strategy=ddp"
        ]
    return []


def check_checkpoint_data(run: Experiment) -> list[str]:
    """The checkpoint to resume or evaluate and the initial weights load as data (engine/safe_load.py),
    unless ``trust_checkpoint`` says to load them anyway."""
    if run.trust_checkpoint:
        return []
    found = []
    ckpt, output_dir = run.ckpt_path, str(run.output_dir or ".")
    if ckpt and not CkptPath(ckpt, output_dir).problems():  # (one not whole is named by that check)
        path = resolve_ckpt_path(str(ckpt), output_dir)
        found += [f"ckpt_path: {p}" for p in (scan_checkpoint(path) if path.exists() else [])]
    weights = run.init.weights
    if (
        weights
        and Path(str(weights)).exists()
        and not InitialWeights(weights).problems()
        and Path(str(weights)).suffix != ".safetensors"
    ):  # (tensors only: nothing to scan)
        found += [f"init.weights: {p}" for p in scan_checkpoint(Path(str(weights)))]
    return found
