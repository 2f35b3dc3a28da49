"""Write docs/reference/config.md: every key the framework reads, from the schemas themselves
(their defaults, ranges and the comments beside each field), so that the reference never drifts
from the code. tests/docs/test_docs.py fails when the committed page differs from what this writes.

    python scripts/config_reference.py          # rewrite docs/reference/config.md
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "config.md"
INTRO = """# Config keys

Every key the framework itself reads, with its default, its valid values and what it means. This
page is generated from the schemas (`framework/config/schemas.py` and each strategy's module) by
`python scripts/config_reference.py`; a test fails when it differs from them. The components
(model, datamodule, task, optimizer, scheduler, callbacks, loggers) take the arguments of the
class their `_target_` names: their YAML files in `conf/` list them.
"""

# The sections of the schemas others extend, for "it takes their keys too".
BASES = {
    "StrategyConfig": "[every strategy's](#strategy-every-strategy)",
    "FSDPConfig": "[strategy=fsdp's](#strategyfsdp)",
    "ScheduleConfig": "[a pipeline's schedule](#strategy-a-pipelines-schedule)",
}


def _comments(source_lines: list[str], node: ast.AnnAssign) -> str:
    """The comment lines just above a field and the comment at its end."""
    above, line = [], node.lineno - 2
    while line >= 0 and source_lines[line].strip().startswith("#"):
        above.insert(0, source_lines[line].strip().lstrip("#").strip())
        line -= 1
    end = source_lines[node.end_lineno - 1]
    inline = end.split("  # ", 1)[1].strip() if "  # " in end else ""
    return " ".join(part for part in [*above, inline] if part)


def _field_notes(schema: type) -> dict[str, tuple[str, str]]:
    """{field: (annotation, comments)} of the fields ``schema`` itself declares."""
    source = Path(inspect.getsourcefile(schema)).read_text()
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == schema.__name__)
    lines = source.splitlines()
    return {
        n.target.id: (ast.unparse(n.annotation), _comments(lines, n))
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def _default(f: dataclasses.Field) -> str:
    """The default as YAML writes it: null, true/false, a quoted string, else the value."""
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def _cell(text: str, code: bool = False) -> str:
    """Text for a table cell: no line breaks, pipes escaped, and outside code <placeholders>
    shown, not taken for HTML."""
    text = text.replace("\n", " ")  # (a code span's pipes do not split a row)
    return text if code else text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _type(annotation: str) -> str:
    """``Optional[Union[bool, Literal['a', 'b']]]`` as ``bool | 'a' | 'b' | null``: what a YAML value may be."""
    text = re.sub(r"Literal\[([^\]]*)\]", lambda m: m.group(1).replace(", ", " | "), annotation)
    while True:  # the innermost Optional[...] or Union[...] first
        found = re.search(r"(Optional|Union)\[([^\[\]]*)\]", text)
        if not found:
            return text.replace("None", "null")
        inner = found.group(2).replace(", ", " | ") + (" | null" if found.group(1) == "Optional" else "")
        text = text[: found.start()] + inner + text[found.end() :]


def table(schema: type, prefix: str) -> list[str]:
    """A markdown table of the fields ``schema`` declares (its bases' are listed with them)."""
    notes = _field_notes(schema)
    rows = ["| key | type | default | valid | meaning |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(schema):
        if f.name not in notes or (f.name == "name" and prefix == "strategy." and schema.__name__ != "StrategyConfig"):
            continue  # a strategy's name is its section's title
        annotation, comment = notes[f.name]
        valid = f.metadata["range"].describe() if "range" in f.metadata else ""
        kind, default = _cell(_type(annotation), code=True), _cell(_default(f), code=True)
        rows.append(f"| `{prefix}{f.name}` | `{kind}` | `{default}` | {_cell(valid)} | {_cell(comment)} |")
    return rows


def _section(title: str, schema: type, prefix: str, words: str = "") -> list[str]:
    doc = inspect.cleandoc(schema.__doc__ or "").replace("\n", " ")
    if doc.startswith(f"{schema.__name__}("):  # the signature dataclass writes where a class has no docstring
        doc = ""
    bases = [BASES.get(b.__name__, f"`{b.__name__}`'s") for b in schema.__bases__ if dataclasses.is_dataclass(b)]
    also = f"It takes {bases[0]} keys too." if bases else ""
    return [f"## {title}", "", " ".join(p for p in (words, doc, also) if p), "", *table(schema, prefix), ""]


def page() -> str:
    from framework.config.schemas import (
        AdapterConfig,
        AutoStrategyConfig,
        HarnessConfig,
        InitConfig,
        RootConfig,
        SchedulerConfig,
        StrategyConfig,
        TrainerConfig,
    )
    from framework.strategies.fsdp import FSDPConfig
    from framework.strategies.pipeline.schedule import ScheduleConfig
    from framework.strategies.registry import STRATEGIES

    parts = [
        INTRO,
        *_section("Top-level keys", RootConfig, ""),
        *_section("trainer", TrainerConfig, "trainer."),
        *_section("init", InitConfig, "init."),
        *_section("harness", HarnessConfig, "harness."),
        *_section("adapter", AdapterConfig, "adapter."),
        *_section("scheduler", SchedulerConfig, "scheduler.", "Besides the scheduler class's own arguments."),
        *_section("strategy (every strategy)", StrategyConfig, "strategy."),
        *_section("strategy=auto", AutoStrategyConfig, "strategy."),
        # the schemas that strategies extend without a class of their own
        *_section(
            "strategy=fsdp",
            FSDPConfig,
            "strategy.",
            "FSDP2's options: fsdp (a preset of parallel) and every strategy that shards with it "
            "(hsdp, fsdp_tp, parallel, pp).",
        ),
        *_section("strategy: a pipeline's schedule", ScheduleConfig, "strategy.", "parallel's with pp > 1, and pp's."),
    ]
    seen = {StrategyConfig, FSDPConfig, ScheduleConfig}
    for name, cls in STRATEGIES.items():
        if cls.schema in seen:
            continue
        seen.add(cls.schema)
        users = ", ".join(f"`{n}`" for n, c in STRATEGIES.items() if c.schema is cls.schema)
        parts += _section(f"strategy={name}", cls.schema, "strategy.", f"`strategy=` {users}.{_presets(cls)}")
    return "\n".join(parts).rstrip() + "\n"


def _presets(cls) -> str:
    """What each preset of ``cls`` sets, and the option names it reads as the class's."""
    said = []
    for preset, p in vars(cls).get("presets", {}).items():
        sets = ", ".join(f"`{k}={'null' if v is None else v}`" for k, v in p.sets.items())
        names = ", ".join(f"`strategy.{old}` for `strategy.{new}`" for old, new in p.names.items())
        said.append(
            f"`{preset}` "
            + (f"sets {sets}" if sets else "keeps the defaults")
            + (f" and reads {names}" if names else "")
        )
    return f" Presets: {'; '.join(said)}." if said else ""


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page())
    print(f"wrote {PAGE.relative_to(ROOT)}")
