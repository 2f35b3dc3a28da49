"""The report's plots: throughput and memory against world size, and the loss curves."""

from __future__ import annotations

from pathlib import Path

from framework.report.compare import train_losses
from framework.report.rows import job_path
from framework.report.settings import label, settings


def warm_up() -> None:
    """Import matplotlib and draw a throwaway figure (its fonts loaded), ahead of ``plots``: a packed
    sweep does it on a device its last jobs leave idle, so the report does not wait for it after them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure()
    figure.add_subplot().plot([0, 1], [0, 1], label="warm-up")
    figure.canvas.draw()
    plt.close(figure)


def plots(sweep_dir: Path, rows: list[dict]) -> list[Path]:
    """throughput.png, memory.png and loss_curves.png in ``sweep_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.get("status") == "completed"]
    paths = [
        _by_world_size(
            plt, sweep_dir / "throughput.png", done, "samples/s (steady state)", lambda r: r.get("samples_per_s")
        )
    ]
    if done and all(r.get("accelerator") == "cuda" for r in done):
        paths.append(
            _by_world_size(
                plt, sweep_dir / "memory.png", done, "peak allocated per rank (MiB)", lambda r: r.get("peak_mem_mib")
            )
        )
    else:  # on CPU, resident memory says how a rank started more than what it holds: the model state
        paths.append(
            _by_world_size(
                plt,
                sweep_dir / "memory.png",
                done,
                "model-state bytes per parameter, per rank",
                lambda r: _per_parameter(r, "model_state_bytes"),
                lambda r: _per_parameter(r, "predicted_model_state_bytes"),
            )
        )
    paths.append(_loss_curves(plt, sweep_dir, done))
    return paths


def _per_parameter(row: dict, key: str):
    return row[key] / row["parameters"] if row.get(key) and row.get("parameters") else None


def _by_world_size(plt, path: Path, rows: list[dict], ylabel: str, measured, predicted=None) -> Path:
    """One line per series of ``measured(row)`` against world size (``predicted``: dashed beside it)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 4))
    for series in sorted({r["series"] for r in rows}):
        mine = [r for r in rows if r["series"] == series]
        pts = sorted((r["world_size"], measured(r)) for r in mine if measured(r) is not None)
        if pts:
            (line,) = ax.plot(*zip(*pts), marker="o", label=series)
            guess = sorted((r["world_size"], predicted(r)) for r in mine if predicted and predicted(r) is not None)
            if guess:
                ax.plot(*zip(*guess), linestyle="--", marker="x", color=line.get_color(), label=f"{series} (predicted)")
    ax.set_xlabel("devices (world size)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    if ax.lines:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _loss_curves(plt, sweep_dir: Path, rows: list[dict]) -> Path:
    """One curve per setting (jobs that differ only in seed): the mean train/loss over its seeds at
    each step they all logged, with a band of one sample standard deviation (n >= 2)."""
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for setting in settings(rows):
        curves = [train_losses(job_path(r, sweep_dir)) for r in setting["done"]]
        curves = [c for c in curves if c]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        losses = np.array([[c[s] for s in steps] for c in curves])
        mean = losses.mean(axis=0)
        n = len(curves)
        # a setting that logged few points shows them as markers (a line of one point is invisible)
        (line,) = ax.plot(
            steps, mean, marker="o" if len(steps) < 5 else None, markersize=4, label=f"{_name(setting)} (n={n})"
        )
        if n > 1:
            std = losses.std(axis=0, ddof=1)
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel("train/loss (mean over seeds, band: ±1 std)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sweep_dir / "loss_curves.png", dpi=100)
    plt.close(fig)
    return sweep_dir / "loss_curves.png"


def _name(setting: dict) -> str:
    """The setting's swept values; a setting of one job without any: that job's number and strategy."""
    if setting["values"] or len(setting["jobs"]) > 1:
        return label(setting)
    row = setting["jobs"][0]
    return f"{row['job']}: {row.get('series')} x{row.get('world_size')}"
