"""The documentation: the site builds with every link and anchor good, the key reference is the
schemas' own, the README stays an introduction, and the files comments and pages name exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import config_reference

ROOT = Path(__file__).resolve().parents[2]
# a path of the repository, or one inside framework/ (config/schemas.py), as comments write them
PATH = re.compile(
    r"(?<![\w/.<-])((?:framework|cli|job|launch|rank|callbacks|loggers|report|engine|strategies|data|"
    r"models|tasks|config|conf|tests|scripts|benchmarks|experiments|examples|docs)/[\w./-]*\w"
    r"\.(?:py|yaml|md|sh|jsonl|json|toml))"
)
NAMED_IN = ("framework", "conf", "experiments", "docs", "scripts", "benchmarks", "tests")


def test_the_config_reference_is_what_the_schemas_say():
    committed = config_reference.PAGE.read_text()
    assert committed == config_reference.page(), (
        "docs/reference/config.md is stale: run python scripts/config_reference.py"
    )
    assert "| `trainer.max_epochs` | `int | null` | `10` | &gt;= 1, or -1 for no limit |" in committed
    assert "## strategy=fsdp" in committed and "| `strategy.sharding` |" in committed


@pytest.mark.multiprocess
def test_the_site_builds_strictly(tmp_path):
    # strict: a broken link, a missing anchor or a page left out of the nav fails the build
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Five concepts" in index and "results.json" in index  # the README's sections, included
    assert (tmp_path / "site" / "reference" / "config" / "index.html").exists()


def test_the_readme_is_an_introduction():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "pip install -e . && python -m framework.train" in readme
    assert "pip install -e '.[test]' && python -m pytest" in readme
    for page in re.findall(r"\]\((docs/[^)#]+|CHANGELOG\.md)\)", readme):
        assert (ROOT / page).exists(), page


def test_the_paths_that_comments_and_pages_name_exist():
    files = [p for d in NAMED_IN for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".yaml", ".md", ".sh")]
    missing = []
    for path in [*files, ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "CHANGELOG.md"]:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            missing += [
                f"{path.relative_to(ROOT)}:{number}: {name}"
                for name in PATH.findall(line)
                if not any((base / name).exists() for base in (ROOT, ROOT / "framework")) and "NAME" not in name
            ]
    assert not missing, "\n".join(missing)
