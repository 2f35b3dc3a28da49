"""Built-in models: plain ``nn.Module``s; any other module works through ``_target_`` (a component
layer). May import: config."""

from framework.models.cnn import CNN
from framework.models.gpt import GPT
from framework.models.hf_causal_lm import HFCausalLM
from framework.models.hf_classifier import HFSequenceClassifier
from framework.models.mlp import MLP
from framework.models.resnet import resnet18

__all__ = ["CNN", "GPT", "HFCausalLM", "HFSequenceClassifier", "MLP", "resnet18"]
