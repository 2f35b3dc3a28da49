"""Tasks turn (model, batch) into a loss and metrics; point task._target_ at your own (a component
layer). May import: config."""

from framework.tasks.classification import ClassificationTask
from framework.tasks.dpo import DPOTask
from framework.tasks.grpo import GRPOTask
from framework.tasks.language_modeling import LanguageModelingTask

__all__ = ["ClassificationTask", "DPOTask", "GRPOTask", "LanguageModelingTask"]
