"""export_weights: the final weights as one full file, model.pt or model.safetensors (tensors only),
each one a valid init.weights."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from framework import compose, fit
from tests.helpers.configs import TINY

RUN = [*TINY, "trainer.max_epochs=1", "export_weights=true", "logger=csv"]


def test_safetensors_export_holds_the_same_weights_and_starts_another_run(tmp_path):
    fit(compose(RUN), output_dir=str(tmp_path / "pt"))
    fit(compose([*RUN, "export_format=safetensors"]), output_dir=str(tmp_path / "st"))
    assert not (tmp_path / "st" / "model.pt").exists()
    ref, got = torch.load(tmp_path / "pt" / "model.pt"), load_file(str(tmp_path / "st" / "model.safetensors"))
    assert set(got) == set(ref)
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=0, msg=name)
    results = fit(
        compose([*RUN, f"init.weights={tmp_path / 'st' / 'model.safetensors'}", "init.strict=true"]),
        output_dir=str(tmp_path / "init"),
    )
    assert results["status"] == "completed" and len(results["init"]["loaded"]) == len(ref)
