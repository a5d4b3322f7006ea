"""The ``evidence`` command: ``cli.main:main`` is its entry point."""

from cli.main import main

__all__ = ["main"]
