"""MLflow tracking (optional: ``pip install mlflow``); runs are recorded under ``tracking_uri``."""

from __future__ import annotations

from framework.config.optional_modules import install_hint


class MLFlowLogger:
    def __init__(self, experiment_name: str = "framework", tracking_uri: str = "mlruns", run_name: str | None = None):
        import mlflow  # imported here: mlflow is an optional extra

        self.mlflow = mlflow
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment_name)
        self.run = mlflow.start_run(run_name=run_name)

    @classmethod
    def check_config(cls, **_) -> list[str]:
        try:
            import mlflow  # noqa: F401
        except ImportError:
            return [
                f"logger.mlflow: mlflow is not installed; {install_hint('mlflow')}, "
                "or choose logger=tensorboard / logger=csv"
            ]
        return []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        self.mlflow.log_params({k: str(v)[:500] for k, v in params.items()})

    def finalize(self, status: str) -> None:
        self.mlflow.end_run(status="FINISHED" if status == "completed" else "FAILED")
