"""``framework-generate SOURCE --prompt TEXT [--prompt TEXT ...] [--prompts FILE] [key=value ...]``
(``python -m framework.generate``)

Continues each prompt with a trained language model and prints the continuations; predictions.jsonl
(prompt, continuation, tokens) holds them. SOURCE is a run directory (its checkpoints/last), one of
its checkpoints, a Hugging Face model directory with its tokenizer (a run's model_hf/, or any
save_pretrained directory), or a GGUF file (converted once into a cache; pkg://<package>/<file> for
one a package bundles). A model is used as it is (experiment=hf_pretrained: no optimizer, nothing
trained). Keys choose how: task.max_new_tokens=32, task.temperature=0.8,
task.top_k=50, task.top_p=0.9, task.seed=1, strategy=ddp trainer.devices=2 (greedy by default).
Writes to <run dir>/generate/<date>_<time>/ (a model directory: outputs/generate/<date>/<time>/),
or to --output DIR.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import tempfile
from pathlib import Path

GREEDY = ["task.temperature=0", "task.top_k=0", "task.top_p=1.0"]
# The API's hints (fit's, predict's) in this command's words: a run directory it would write over.
_CLI_SPELLING = {
    "resume it with ckpt_path=last, ": "",
    "(fit(cfg, output_dir=...))": "(--output <another directory>)",
    "pass overwrite=True": "add overwrite=true",
}


def _arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="framework-generate",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument(
        "source", help="a run directory, a checkpoint, a Hugging Face model directory, or a GGUF file (.gguf)"
    )
    parser.add_argument("--prompt", action="append", default=[], help="a prompt (repeat for several)")
    parser.add_argument("--prompts", help='a file of prompts: one per line, or a .jsonl of {"prompt": ...}')
    parser.add_argument("--output", help="the directory to write predictions.jsonl to")
    parser.add_argument(
        "--chat",
        action="store_true",
        help="a model directory: each prompt as a user's turn, rendered by its tokenizer's chat template\n"
        "(a run on instruction data renders them so already)",
    )
    args, overrides = parser.parse_known_args(argv)
    if not args.prompt and not args.prompts:
        parser.error("no prompt: give --prompt TEXT (or several) or --prompts FILE")
    return args, overrides


def _checkpoint_of(source: Path) -> Path | None:
    """The checkpoint a run directory or checkpoint path names (None: a model directory)."""
    if (source / "config.yaml").is_file():
        return source / "checkpoints" / "last"
    if (source.parent.parent / "config.yaml").is_file():
        return source
    return None


def _model_run(model: str, prompts_file: str, chat: bool, overrides: list[str]) -> list[str]:
    """A run that only predicts, with the Hugging Face model ``model`` (a directory or a GGUF file) as it
    is and its tokenizer (``chat``: the prompts rendered as a user's turns, datamodule=instructions)."""
    return [
        "experiment=hf_pretrained",
        *(["datamodule=instructions"] if chat else []),
        f"model.path='{model}'",
        f"datamodule.predict_file='{prompts_file}'",
        "test=false",
        "predict=true",
        "predict_format=jsonl",
        "logger=none",
        "callbacks=none",
        *GREEDY,
        *overrides,
    ]


def _source(text: str) -> Path | None:
    """SOURCE on disk (``pkg://`` resolved); None: a package that is not installed."""
    from framework.config.package_paths import resolve_path

    try:
        return resolve_path(text).resolve()
    except FileNotFoundError:
        return None


_ADAPTERS_ALONE = (
    "{source}: adapters alone (peft's format), without the base they adapt: generate from the run's "
    "directory or a checkpoint of it, or export them merged (export_merge=true)"
)


def _in_cli_words(message: str) -> str:
    for api, cli in _CLI_SPELLING.items():
        message = message.replace(api, cli)
    return message


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException

    from framework.api import fit, predict
    from framework.cli.compose import compose
    from framework.config import ConfigError
    from framework.config.errors import InputError
    from framework.engine.signals import Interrupted
    from framework.launch.failures import JobFailed

    args, overrides = _arguments(sys.argv[1:] if argv is None else argv)
    source, stamp = _source(args.source), _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    with tempfile.TemporaryDirectory(prefix="framework-generate-") as scratch:
        prompts_file = args.prompts or str(Path(scratch) / "prompts.jsonl")
        if not args.prompts:
            Path(prompts_file).write_text("".join(json.dumps({"prompt": p}) + "\n" for p in args.prompt))
        ckpt = _checkpoint_of(source) if source is not None else None
        try:
            if ckpt is not None:
                output = args.output or str(ckpt.parent.parent / "generate" / stamp)
                jsonl = ["predict_format=jsonl", f"++datamodule.predict_file='{prompts_file}'", "++harness.tasks=[]"]
                # (its log in train.log: this command's output is the continuations)
                results = predict(str(ckpt), [*jsonl, *GREEDY, *overrides], output_dir=output, verbose=False)
            elif source is None or not source.exists():
                print(f"{args.source}: nothing there (a run directory, a checkpoint, a model, .gguf)", file=sys.stderr)
                return 2
            elif (source / "adapter_config.json").is_file() and not (source / "config.json").is_file():
                print(_ADAPTERS_ALONE.format(source=source), file=sys.stderr)
                return 2
            else:
                output = args.output or str(Path("outputs/generate") / stamp.replace("_", "/"))
                model = args.source if args.source.startswith("pkg://") else str(source)
                run = compose(_model_run(model, prompts_file, args.chat, overrides))
                results = fit(run, output_dir=output, verbose=False)
        except (ConfigError, HydraException) as err:  # (an override Hydra cannot parse: as framework-train says it)
            print(_in_cli_words(str(err)), file=sys.stderr)
            return 2
        except (InputError, JobFailed):  # a damaged checkpoint, a rank that died: the run's log said why, once
            return 1
        except Interrupted as err:  # (a stop signal: nothing to resume, the prompts are run again whole)
            print(f"framework-generate: stopped by signal {err.signum}", file=sys.stderr)
            return 128 + err.signum
    if results.get("status") != "completed":
        print(f"framework-generate: {results.get('status')}: {results.get('error', '')}", file=sys.stderr)
        return 1
    for row in map(json.loads, (Path(output) / "predictions.jsonl").read_text().splitlines()):
        print(f"{row['prompt']!r} -> {row['continuation']!r}")
    print(f"(written to {Path(output) / 'predictions.jsonl'})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
