"""Moved to :mod:`vcm.service.context`. This name stays only while the API's models and
``scripts/eval_context.py`` still import it from here; import from :mod:`vcm.service` instead,
then delete this module."""

from vcm.service.context import BuiltContext

__all__ = ["BuiltContext"]
