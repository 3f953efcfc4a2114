"""Shim for tools that still call setup.py; the project is declared in pyproject.toml."""

from setuptools import setup

setup()
