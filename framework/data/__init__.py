"""DataModules: setup(stage) and *_dataloader(); the engine supplies the sampler (a component
layer, with the sampler and batched fetching). May import: config."""
from framework.data.base import BaseDataModule
from framework.data.digits import DigitsDataModule
from framework.data.synthetic import SyntheticDataModule
from framework.data.text import TextDataModule
from framework.data.text_classification import TextClassificationDataModule
from framework.data.vision import CIFAR10DataModule, ImageFolderDataModule, MNISTDataModule

__all__ = ["BaseDataModule", "DigitsDataModule", "SyntheticDataModule", "MNISTDataModule",
           "CIFAR10DataModule", "ImageFolderDataModule", "TextDataModule", "TextClassificationDataModule"]
