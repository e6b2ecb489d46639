"""vcm's shipped configuration files, importable as ``vcm.config`` once vcm is installed."""

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """A file of this directory (``default.toml``, ``arango_schema.json``)."""
    return DIRECTORY / name
