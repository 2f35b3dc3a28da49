"""A group option that does not exist is named before Hydra composes, with the closest option."""

from __future__ import annotations

from framework.config.group_choices import unknown_options
from tests.e2e.test_cli import train


def test_every_selection_is_checked_lists_and_sweeps_too():
    assert unknown_options(["strategy=tpp"])[0].startswith("strategy: no option 'tpp'; did you mean 'strategy=tp'?")
    assert "did you mean 'model=gpt/tiny'" in unknown_options(["model=gpt/tny"])[0]
    assert "no option 'cvs'" in unknown_options(["logger=[tensorboard,cvs]"])[0]
    assert "no option 'fsdpp'" in unknown_options(["-m", "strategy=ddp,fsdpp"])[0]
    # nothing close: maybe an option of the user's own, not found without hydra.searchpath
    assert unknown_options(["model=yours"])[0].endswith(
        "an option of your own is <your configs>/model/yours.yaml, found with "
        "hydra.searchpath=[file:///abs/path/to/your/configs]"
    )
    valid = [
        "strategy=pp/fsdp",
        "model=gpt/tiny",
        "logger=[tensorboard,csv]",
        "scheduler=null",
        "experiment=gpt_text",
        "strategy=choice(ddp,fsdp)",
        "hydra/launcher=basic",
        "trainer.devices=2",
        "+callbacks=[default,ema]",
    ]
    assert unknown_options(valid) == []


def test_options_of_the_users_config_dirs_count(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("_target_: torch.nn.Identity\n")
    assert unknown_options([f"hydra.searchpath=[file://{tmp_path}]", "model=mine"]) == []
    primary = tmp_path / "primary"
    primary.mkdir()
    (primary / "run.yaml").write_text(f"hydra:\n  searchpath: [file://{tmp_path}]\n")
    assert unknown_options(["--config-dir", str(primary), "--config-name", "run", "model=mine"]) == []
    assert unknown_options(["model=mine"]) != []


def test_the_command_line_exits_2_with_the_suggestion(tmp_path):
    proc = train("strategy=tpp", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "did you mean 'strategy=tp'?" in proc.stderr
    assert not (tmp_path / "run").exists()
