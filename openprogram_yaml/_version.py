"""The package version, at the root so that any layer can read it without the face."""

__version__ = "0.1.0"
