"""Config schemas (every default and range, once), validation, topology, the launcher environment
and the errors they raise: the bottom layer, no torch on import. May import: nothing of the framework
above it."""

from framework.config.errors import ConfigError
from framework.config.resolvers import register as _register_resolvers
from framework.config.validate import validate

_register_resolvers()

__all__ = ["ConfigError", "validate"]
