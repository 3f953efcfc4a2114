"""Shared test setup."""

import gin
import pytest

from alf.configurables import import_configurables

# Configs in the tests name any of ALF's configurables, as the command-line tools allow.
import_configurables()


@pytest.fixture(autouse=True)
def _no_gin_bindings():
    """Configurables built in a test see their defaults, not another test's config."""
    gin.clear_config()
    yield
    gin.clear_config()
