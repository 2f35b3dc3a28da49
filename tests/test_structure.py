"""The structure of ``framework/`` is a checked property (scripts/structure.py): no function over 50 lines,
no import cycle between its modules or its packages."""

from __future__ import annotations

from scripts import structure


def test_no_function_is_over_50_lines_and_no_import_forms_a_cycle():
    assert structure.findings() == []


def test_a_long_function_and_a_cycle_are_found(tmp_path):
    package = tmp_path / "framework"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine" / "__init__.py").write_text("from framework.config import x\n")
    (package / "config.py").write_text("import framework.engine\n\n\ndef x():\n" + "    pass\n" * 51)
    long = (package / "config.py").relative_to(tmp_path)
    assert structure.findings(tmp_path, 50) == [
        "cycle: framework.config <-> framework.engine",  # (of the modules)
        "cycle: framework.config <-> framework.engine",  # (of the packages)
        f"long: {long}:4 x 52",
    ]
