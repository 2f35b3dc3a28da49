"""Before start the checks read what the config and the files' headers declare: none reads a whole
corpus, forks a process or builds the model more than once (on the meta device), however many of
them need the model. What needs the work itself is checked where the ranks do it (the epoch's
length of a text corpus: tests/data/test_text.py)."""

from __future__ import annotations

import os

import pytest

import framework.data.text as text
import framework.models.gpt as gpt
from framework import compose
from framework.job.preflight import preflight

EVERY_MODEL_CHECK = [
    "experiment=gpt_text",
    "trainer.val_check_interval=2",  # an epoch's length: the text datamodule's needs its corpus encoded
    "strategy=fsdp_tp",  # the model's tensor-parallel plan against its sizes
    "trainer.devices=4",
    "trainer.oversubscribe=true",
    "+optimizer.param_groups=[{params: '*norm*', weight_decay: 0}]",  # names matched against the model
    "init.freeze=[tok_embeddings]",  # submodule names
]


@pytest.fixture
def counted(monkeypatch):
    counts = {"builds": 0, "corpus_reads": 0, "forks": 0}

    def count(key, wrapped):
        def call(*args, **kwargs):
            counts[key] += 1
            return wrapped(*args, **kwargs)

        return call

    monkeypatch.setattr(gpt.GPT, "__init__", count("builds", gpt.GPT.__init__))
    monkeypatch.setattr(text, "read_corpus", count("corpus_reads", text.read_corpus))
    monkeypatch.setattr(os, "fork", count("forks", os.fork))
    return counts


@pytest.mark.parametrize(
    "extra",
    [[], ["trainer.compile=blocks", "strategy=fsdp"], ["adapter=lora"]],  # (lora: its target modules)
)
def test_the_checks_before_start_read_no_corpus_fork_nothing_and_build_the_model_once(counted, extra):
    preflight(compose([*EVERY_MODEL_CHECK, *extra]))
    assert counted == {"builds": 1, "corpus_reads": 0, "forks": 0}
