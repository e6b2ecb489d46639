"""Secrets and URLs in settings: which settings must come from the environment, URL checks,
and URLs with their password redacted for reprs and logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def check_url(value: str, schemes: tuple[str, ...], name: str) -> str:
    if value and not value.startswith(schemes):
        raise ValueError(f"{name} must start with one of {', '.join(schemes)}")
    return value


# Secrets that must come from the environment, never from a config file on disk.
SECRET_SETTINGS = ("store.password", "store.ro_password", "api.admin_token")


# URLs whose userinfo must carry no password in a config file (put it in the environment instead).
URL_SETTINGS = ("redis_url", "broker_url", "store_url", "worker.result_backend")


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def secrets_in_file(data: Mapping[str, Any]) -> list[str]:
    """Settings of a config file that hold a secret (names only, never values)."""
    found = [name for name in SECRET_SETTINGS if _lookup(data, name) not in (None, "")]
    for name in URL_SETTINGS:
        value = _lookup(data, name)
        if isinstance(value, str) and urlsplit(value).password:
            found.append(name)
    return found


def redact_url(url: str) -> str:
    """``scheme://user:secret@host`` -> ``scheme://user:***@host``; other URLs unchanged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
