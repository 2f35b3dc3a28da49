"""One process, one device: the base Strategy as it is."""

from framework.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    name = "single"
