"""DataModules: setup(stage) and *_dataloader(); the engine supplies the sampler."""
from framework.data.base import DataModule
from framework.data.digits import DigitsDataModule
from framework.data.synthetic import SyntheticDataModule
from framework.data.vision import CIFAR10DataModule, ImageFolderDataModule, MNISTDataModule

__all__ = ["DataModule", "DigitsDataModule", "SyntheticDataModule", "MNISTDataModule",
           "CIFAR10DataModule", "ImageFolderDataModule"]
