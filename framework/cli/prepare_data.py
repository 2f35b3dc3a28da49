"""``framework-prepare-data input=<files, folders or globs> output=<dir> [tokenizer=<file or model dir>]
[key=value ...]``: tokenize a corpus once into token shards that ``datamodule=tokens`` trains on
(framework/data/prepare.py says how). Run it again to resume, or with new inputs to append."""

from __future__ import annotations

import dataclasses
import sys

from framework.config.errors import ConfigError


def parse(args: list[str]):
    """The settings the ``key=value`` arguments give; ConfigError naming a key that is unknown, missing
    or of the wrong type, with the valid keys."""
    from omegaconf import OmegaConf

    from framework.data.prepare import PrepareSettings

    keys = [f.name for f in dataclasses.fields(PrepareSettings)]
    given = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in keys:
            raise ConfigError([f"{arg}: expected key=value with a key among {', '.join(keys)}"])
        given.update(OmegaConf.to_container(OmegaConf.from_dotlist([arg])))
    for required in ("input", "output"):
        if not given.get(required):
            raise ConfigError(
                [f"{required}: missing (usage: framework-prepare-data input=<files> output=<dir> [tokenizer=<file>])"]
            )
    if not isinstance(given["input"], list):
        given["input"] = [given["input"]]
    try:
        settings = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrepareSettings), given))
    except Exception as err:  # noqa: BLE001 - OmegaConf's validation errors carry the key
        key = getattr(err, "full_key", None)
        raise ConfigError([f"{key}: {str(err).splitlines()[0]}" if key else str(err).splitlines()[0]]) from err
    for key in ("val_fraction", "test_fraction"):
        if not 0 <= getattr(settings, key) < 1:
            raise ConfigError([f"{key}: must be in [0, 1), got {getattr(settings, key)}"])
    if settings.val_fraction + settings.test_fraction >= 1:
        raise ConfigError(["val_fraction + test_fraction: must stay below 1 (training needs documents)"])
    problems = [f"workers: must be >= 0 (0: one per core), got {settings.workers}"] if settings.workers < 0 else []
    problems += [f"piece_mb: must be > 0, got {settings.piece_mb}"] if settings.piece_mb <= 0 else []
    field, equals, _ = (settings.where or "").partition("=")
    if settings.where is not None and not (field and equals):
        problems.append(f"where: {settings.where!r} is not field=value (where=lang=en keeps the rows whose lang is en)")
    if problems:
        raise ConfigError(problems)
    return settings


def main() -> None:
    args = sys.argv[1:]
    if {"-h", "--help"} & set(args):
        from framework.data.prepare import PrepareSettings

        shown = {None: "null", "": "(required)"}
        keys = (
            f"  {f.name}={shown.get(f.default, repr(f.default))}: {f.metadata['help']}"
            if f.name != "input"
            else f"  input=[...]: {f.metadata['help']}"
            for f in dataclasses.fields(PrepareSettings)
        )
        print(f"usage: {__doc__.replace('``', '')}\nkeys (default):\n" + "\n".join(keys))
        return
    from framework.data.prepare import Stopped, prepare

    try:
        settings = parse(args)
        index = prepare(settings)
    except Stopped as err:
        print(f"framework-prepare-data: stopped: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except (ValueError, FileNotFoundError, ImportError) as err:  # a bad input or key: named, no traceback
        print(f"framework-prepare-data: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # the machine's (a full disk, a file it may not read): named too, the pieces done kept
        print(f"framework-prepare-data: {err}", file=sys.stderr)
        sys.exit(1)
    tokens = index["tokens"]
    print(
        f"{index['documents']:,} documents, {sum(tokens.values()):,} tokens ({index['dtype']}): "
        + ", ".join(f"{split} {count:,}" for split, count in tokens.items())
        + f"\ntrain on it: framework-train experiment=gpt_tokens datamodule.path={settings.output}"
    )


if __name__ == "__main__":
    main()
