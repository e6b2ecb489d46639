"""Typed settings: ``config/default.toml``, then an optional ``VCM_CONFIG`` file, then ``VCM_*``
environment variables. Invalid values fail at start with :class:`ConfigError` naming the setting.

The sections live by concern: :mod:`.context` (the hot path's context window), :mod:`.memory`
(what the cold path builds), :mod:`.runtime` (processes and the services they reach); the root
model in :mod:`.model`, secrets and URL rules in :mod:`.secrecy`, loading in :mod:`.loading`.
"""

# The root, loading, and the sections the hot path and the API take (hotpath.budget,
# hotpath.tokens, vcm.api.chat); other sections are imported from their modules.
from vcm.settings.context import BudgetSettings, ChatSettings, TokenSettings
from vcm.settings.loading import DEFAULT_CONFIG, get_settings, load_settings
from vcm.settings.model import Settings
from vcm.settings.secrecy import redact_url

__all__ = [
    "DEFAULT_CONFIG",
    "BudgetSettings",
    "ChatSettings",
    "Settings",
    "TokenSettings",
    "get_settings",
    "load_settings",
    "redact_url",
]
