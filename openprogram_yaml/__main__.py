"""``python -m openprogram_yaml`` is ``openprogram-run``."""

from .runner.cli import entrypoint

entrypoint()
