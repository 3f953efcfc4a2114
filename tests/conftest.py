"""Shared test setup."""

import gin
import pytest


@pytest.fixture(autouse=True)
def _no_gin_bindings():
    """Configurables built in a test see their defaults, not another test's config."""
    gin.clear_config()
    yield
    gin.clear_config()
