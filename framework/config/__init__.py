"""Config schemas, validation and the errors they raise."""
from framework.config.errors import ConfigError
from framework.config.validate import validate

__all__ = ["ConfigError", "validate"]
