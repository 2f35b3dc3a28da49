"""torchvision datasets read from a local ``data_dir``; nothing downloads unless asked to."""

from __future__ import annotations

from pathlib import Path

from framework.data.base import BaseDataModule, split_dataset


class _TorchvisionDataModule(BaseDataModule):
    inputs, targets = "features", "classes"
    dataset_name = ""  # torchvision.datasets class, set by subclasses
    expected = ""  # what must exist under data_dir, for the error message
    mean: tuple = ()
    std: tuple = ()

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = False,
        batch_size: int = 128,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        split_seed: int = 0,
        input_shape: list | None = None,
        num_classes: int = 10,
    ):
        super().__init__(batch_size, num_workers, input_shape, num_classes)
        self.data_dir, self.download = data_dir, download
        self.val_fraction, self.split_seed = val_fraction, split_seed

    @classmethod
    def check_config(cls, data_dir: str = "data", download: bool = False, **_) -> list[str]:
        """Problems found before any process starts (called by config validation)."""
        if download or (Path(data_dir) / cls.expected).exists():
            return []
        name = cls.dataset_name
        return [
            f"datamodule.data_dir: {name} not found: '{Path(data_dir) / cls.expected}' does not exist. "
            f'Get it on a machine with internet: python -c "import torchvision; '
            f"torchvision.datasets.{name}('{data_dir}', download=True)\" and copy '{data_dir}' here, "
            f"or set datamodule.data_dir=<dir that holds it> (datamodule.download=true downloads at run time)"
        ]

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        problems = self.check_config(self.data_dir, self.download)
        if problems:
            raise FileNotFoundError(problems[0])
        from torchvision import datasets, transforms  # here: importing torchvision costs seconds

        dataset_cls = getattr(datasets, self.dataset_name)
        tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize(self.mean, self.std)])
        full_train = dataset_cls(self.data_dir, train=True, download=self.download, transform=tf)
        self.test_set = dataset_cls(self.data_dir, train=False, download=self.download, transform=tf)
        image, _ = full_train[0]
        self._check_shape(image.shape, len(full_train.classes), self.dataset_name)
        self.val_set, self.train_set = split_dataset(full_train, [self.val_fraction], self.split_seed)


class MNISTDataModule(_TorchvisionDataModule):
    dataset_name = "MNIST"
    expected = "MNIST/raw"
    mean, std = (0.1307,), (0.3081,)


class CIFAR10DataModule(_TorchvisionDataModule):
    dataset_name = "CIFAR10"
    expected = "cifar-10-batches-py"
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class ImageFolderDataModule(BaseDataModule):
    """``data_dir/train/<class>/*``; ``data_dir/val`` and ``data_dir/test`` if present, else split from train."""

    inputs, targets = "features", "classes"

    def __init__(
        self,
        data_dir: str,
        batch_size: int = 64,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        split_seed: int = 0,
        input_shape: list = (3, 64, 64),
        num_classes: int | None = None,
    ):
        super().__init__(batch_size, num_workers, input_shape, num_classes)
        self.data_dir = Path(data_dir)
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed

    @classmethod
    def check_config(cls, data_dir: str = "", **_) -> list[str]:
        if (Path(data_dir) / "train").is_dir():
            return []
        return [
            f"datamodule.data_dir: '{Path(data_dir) / 'train'}' is not a directory. ImageFolder expects "
            f"<data_dir>/train/<class name>/<image files> (and optionally <data_dir>/val, <data_dir>/test)"
        ]

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        problems = self.check_config(str(self.data_dir))
        if problems:
            raise FileNotFoundError(problems[0])
        channels, height, width = self.input_shape
        from torchvision import datasets, transforms

        steps = [transforms.Resize((height, width))]
        if channels == 1:
            steps.append(transforms.Grayscale(1))
        tf = transforms.Compose(steps + [transforms.ToTensor()])
        train = datasets.ImageFolder(self.data_dir / "train", transform=tf)
        self._check_shape(train[0][0].shape, len(train.classes), f"ImageFolder '{self.data_dir / 'train'}'")
        val_dir, test_dir = self.data_dir / "val", self.data_dir / "test"
        self.train_set = train
        fractions = []
        if not val_dir.is_dir():
            fractions.append(self.val_fraction)
        if not test_dir.is_dir():
            fractions.append(self.test_fraction)
        parts = split_dataset(train, fractions, self.split_seed)
        self.train_set = parts.pop()
        self.val_set = datasets.ImageFolder(val_dir, transform=tf) if val_dir.is_dir() else parts.pop(0)
        self.test_set = datasets.ImageFolder(test_dir, transform=tf) if test_dir.is_dir() else parts.pop(0)
