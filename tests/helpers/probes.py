"""Probe plug-ins that record what the engine did, named by ``_target_: tests.helpers.probes.X``
in the tests' configs (callbacks, loggers, datamodules, a model)."""

from __future__ import annotations

import os

import torch

from framework.config.environment import LAUNCHER_PID
from framework.data.digits import DigitsDataModule
from framework.tasks.language_modeling import LanguageModelingTask


class ForwardDtypes:
    """A callback: records (weight dtype, output dtype) of every Linear/Conv2d forward in training,
    in the class-level list ``seen`` (the run is in this process)."""

    seen: list = []

    def on_fit_start(self, trainer) -> None:
        ForwardDtypes.seen = []

        def record(module, inputs, output):
            if module.training:
                ForwardDtypes.seen.append((module.weight.dtype, output.dtype))

        for module in trainer.model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
                module.register_forward_hook(record)


class CompileProbe(torch.nn.Module):
    """An MLP that counts the forwards that ran as compiled code: ``torch.compiler.is_compiling()``
    is a constant True in a compiled frame and False in eager Python."""

    compiled_calls = 0

    def __init__(self, input_shape: list, num_classes: int):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(int(torch.tensor(input_shape).prod()), 32),
            torch.nn.ReLU(),
            torch.nn.Linear(32, num_classes),
        )

    def forward(self, x):
        if torch.compiler.is_compiling():
            CompileProbe.compiled_calls += 1
        return self.net(x)


class ParamGroups:
    """A callback: the optimizer's (param count, lr) per group at every epoch end, in ``seen``."""

    def __init__(self):
        self.seen = []

    def on_train_epoch_end(self, trainer) -> None:
        self.seen.append([(len(g["params"]), g["lr"]) for g in trainer.optimizer.param_groups])


class GroupProbe:
    """A callback: each group's (name, parameter names, weight decay, lr) at fit start."""

    seen: list = []

    def on_fit_start(self, trainer) -> None:
        names = {id(p): n for n, p in trainer.strategy.unwrap(trainer.model).named_parameters()}
        GroupProbe.seen = [
            (g.get("name"), sorted(names[id(p)] for p in g["params"]), g["weight_decay"], g["lr"])
            for g in trainer.optimizer.param_groups
        ]


class EnvProbe:
    """A callback: writes the FRAMEWORK_PROBE variable each rank sees to out_dir/rank<r>."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir

    def on_fit_start(self, trainer) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, f"rank{trainer.strategy.rank}"), "w") as f:
            f.write(os.environ.get("FRAMEWORK_PROBE", "<unset>"))


class TypoCallback:
    """A user callback with a misspelled hook: it would never run."""

    def on_train_epoch_ends(self, trainer) -> None:
        pass


class FailsAtFitStart:
    """A user callback that fails inside the rank once fit starts (no check before start can know), where
    ``fail`` says so."""

    def __init__(self, fail: bool = True):
        self.fail = fail

    def on_fit_start(self, trainer) -> None:
        if self.fail:
            raise ValueError("the user's callback failed at fit start")


class NoFinalizeLogger:
    """A user logger missing finalize()."""

    def log_metrics(self, metrics, step) -> None:
        pass

    def log_hparams(self, params, metrics) -> None:
        pass


class FailingFinalizeLogger(NoFinalizeLogger):
    """A user logger whose finalize() raises."""

    def finalize(self, status: str) -> None:
        raise OSError(f"finalize failed (status {status})")


class SlowFinalizeLogger(NoFinalizeLogger):
    """A user logger whose finalize() takes a while (a remote logger flushing its queue)."""

    def __init__(self, seconds: float = 1.0):
        self.seconds = seconds

    def finalize(self, status: str) -> None:
        import time

        time.sleep(self.seconds)


class SignalAt:
    """A callback: sends ``signal`` to its own process after optimizer step ``step`` (on ``rank``
    only, in the first attempt of an elastically restarted job)."""

    def __init__(self, step: int, signal: str = "SIGTERM", rank: int = 0):
        self.step, self.signal, self.rank = step, signal, rank

    def on_train_step_end(self, trainer, loss) -> None:
        import signal as signals

        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if trainer.global_step == self.step and trainer.strategy.rank == self.rank and first_attempt:
            os.kill(os.getpid(), getattr(signals, self.signal))


class SignalInJob:
    """A callback: sends SIGTERM to its own process after optimizer step ``step`` of the ``job``-th
    training this process runs (the jobs of a sweep under the basic launcher share the process: a
    sweep killed while that job trains), once: it creates the file ``once`` then, and never signals
    while it exists (the same command again runs on)."""

    fits = 0  # the trainings this process has started

    def __init__(self, step: int, job: int, once: str):
        self.step, self.job, self.once, self.nth = step, job, once, None

    def on_fit_start(self, trainer) -> None:
        SignalInJob.fits += 1
        self.nth = SignalInJob.fits

    def on_train_step_end(self, trainer, loss) -> None:
        import signal

        if self.nth == self.job and trainer.global_step == self.step and not os.path.exists(self.once):
            open(self.once, "w").close()
            os.kill(os.getpid(), signal.SIGTERM)


class OutlastAtFirstStep:
    """A callback: optimizer step 1 lasts ``seconds`` at least (a sleep before the Timer's check,
    which runs in on_train_step_end), so a shorter ``trainer.max_time`` has passed when the Timer
    first looks, however fast the step: a warm process runs a tiny model's step in under 1 ms."""

    def __init__(self, seconds: float = 0.01):
        self.seconds = seconds

    def on_train_batch_end(self, trainer, loss, batch_idx) -> None:
        import time

        if trainer.global_step == 1:
            time.sleep(self.seconds)


class Slow:
    """A callback: sleeps ``seconds`` after every optimizer step, so that a test can signal a run
    from outside while it trains (it changes no number of the run)."""

    def __init__(self, seconds: float = 0.2):
        self.seconds = seconds

    def on_train_step_end(self, trainer, loss) -> None:
        import time

        time.sleep(self.seconds)


def plain_digits(**kwargs):
    """DigitsDataModule whose splits are torch's own Subset(TensorDataset): samples fetched one by
    one and collated, as before batched fetching (a reference to compare with, bit for bit)."""
    from torch.utils.data import Subset, TensorDataset

    from framework.data import DigitsDataModule

    module = DigitsDataModule(**kwargs)
    setup = module.setup

    def plain_setup(stage: str) -> None:
        setup(stage)
        for name in ("train_set", "val_set", "test_set"):
            gathered = getattr(module, name)
            if isinstance(gathered, TensorDataset):  # not yet replaced (setup runs once per stage)
                setattr(module, name, Subset(TensorDataset(*gathered.tensors), range(len(gathered))))

    module.setup = plain_setup
    return module


class EvenBatchesDigits(DigitsDataModule):
    """A datamodule of the user's own that answers for the run it is in (``check_run``): it wants an
    even ``datamodule.batch_size`` when the model is an MLP (any rule of the user's would do)."""

    @classmethod
    def check_run(cls, run) -> list[str]:
        batch = run.datamodule.get("batch_size")
        if run.model.name == "MLP" and batch % 2:
            return [f"datamodule.batch_size: {batch}; {cls.__name__} wants an even batch for model {run.model.name}"]
        return []


class CountingDigits(DigitsDataModule):
    """A datamodule: the digits one, recording at each train_dataloader() call the epoch its
    ``trainer`` (set under reload_dataloaders_every_n_epochs) was at, in ``calls``."""

    calls: list = []

    def train_dataloader(self):
        trainer = getattr(self, "trainer", None)
        CountingDigits.calls.append(trainer.current_epoch if trainer is not None else None)
        return super().train_dataloader()


class GlobalFlags:
    """A callback: torch's anomaly detection flag during fit, in ``seen``."""

    seen: list = []

    def on_fit_start(self, trainer) -> None:
        GlobalFlags.seen = [torch.is_anomaly_enabled()]


class NoPredictDigits:
    """A datamodule of the bare contract (setup, train/val/test loaders): no predict_dataloader."""

    def __init__(self, batch_size: int = 32):
        self.inner = DigitsDataModule(batch_size=batch_size)

    def setup(self, stage: str) -> None:
        self.inner.setup(stage)

    def train_dataloader(self):
        return self.inner.train_dataloader()

    def val_dataloader(self):
        return self.inner.val_dataloader()

    def test_dataloader(self):
        return self.inner.test_dataloader()


class TrainOnlyDigits(NoPredictDigits):
    """A datamodule without a test split: no test_dataloader either."""

    test_dataloader = None


class LogitsOnly(LanguageModelingTask):
    """task=language_modeling without its predict_step: the model's logits are its predictions."""

    predict_step = None


class ListeningSockets:
    """A callback: on rank 0 at fit start, the local addresses of every listening TCP socket held by
    the job's processes (the launcher and all below it, from /proc), as JSON in ``out``."""

    def __init__(self, out: str):
        self.out = out

    def on_fit_start(self, trainer) -> None:
        import json

        from scripts.failure_drill import tree

        if trainer.rank != 0:
            return
        inodes = set()
        for pid in tree(int(os.environ.get(LAUNCHER_PID, os.getppid()))):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        with open(self.out, "w") as f:
            json.dump(listening_addresses(inodes), f)


def listening_addresses(inodes: set) -> list[str]:
    """'address:port' of the listening sockets (state 0A) of /proc/net/tcp and tcp6 with these inodes."""
    import ipaddress

    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:
                    continue
                hexaddr, port = local.split(":")
                raw = bytes.fromhex(hexaddr)
                # /proc prints each 32-bit word in host (little-endian) order
                ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.append(f"{ipaddress.ip_address(ordered)}:{int(port, 16)}")
    return found


class SlowTest:
    """A callback: at the test's start, rank 0 writes ``marker`` (training is over and saved), then
    every rank waits ``seconds`` in short sleeps (a test that takes long), so that a test can stop
    the job from outside while it tests."""

    def __init__(self, marker: str, seconds: float = 60.0):
        self.marker, self.seconds = marker, seconds

    def on_test_start(self, trainer) -> None:
        import time

        if trainer.rank == 0:
            with open(self.marker, "w") as f:
                f.write(str(trainer.global_step))
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
