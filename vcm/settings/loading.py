"""Loading settings: ``config/default.toml``, then an optional ``VCM_CONFIG`` file, then ``VCM_*``
environment variables; invalid values fail with :class:`ConfigError` naming the setting.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from vcm import config as vcm_config
from vcm.errors import ConfigError
from vcm.settings.model import Settings
from vcm.settings.secrecy import secrets_in_file

DEFAULT_CONFIG = vcm_config.path("default.toml")


ENV_PREFIX = "VCM_"


ENV_NESTED = "__"


# Variables under the prefix that are not settings: the config path and test-only knobs.
_ENV_IGNORED = ("VCM_CONFIG", "VCM_TEST_")


# Variables of the command line's clients (`--token`, `--api`), exactly these names: not settings.
_ENV_CLIENT = frozenset({"VCM_TOKEN", "VCM_API_URL"})


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist", setting="VCM_CONFIG") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}", setting=str(path)) from None


def _refuse_secrets(data: Mapping[str, Any], path: Path) -> None:
    found = secrets_in_file(data)
    if found:
        env = ", ".join(ENV_PREFIX + n.upper().replace(".", ENV_NESTED) for n in found)
        raise ConfigError(
            f"config file {path} holds a secret in {', '.join(found)}: secrets come only from the "
            f"environment ({env}); remove it from the file",
            setting=found[0],
        )


def _describe(exc: PydanticValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if not loc:
            parts.append(f"invalid settings: {err['msg']}")
            continue
        env = ENV_PREFIX + ENV_NESTED.join(str(p) for p in err["loc"]).upper()
        parts.append(f"invalid setting {loc} (env {env}): {err['msg']}")
    return "; ".join(parts)


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """``VCM_BUDGET__WARNING=0.8`` -> {"budget": {"warning": "0.8"}}; pydantic coerces types."""
    out: dict[str, Any] = {}
    for name, value in environ.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper.startswith(_ENV_IGNORED) or upper in _ENV_CLIENT:
            continue
        path = upper.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED)
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another", setting=name)
        node[path[-1]] = value
    return out


def load_settings(overrides: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Defaults TOML < ``VCM_CONFIG`` file < ``VCM_*`` environment < explicit overrides."""
    env = os.environ if environ is None else environ
    data = _read_toml(DEFAULT_CONFIG)
    _refuse_secrets(data, DEFAULT_CONFIG)
    extra = env.get(ENV_PREFIX + "CONFIG")
    if extra:
        own = _read_toml(Path(extra))
        _refuse_secrets(own, Path(extra))
        data = _deep_merge(data, own)
    data = _deep_merge(data, _env_values(env))
    if overrides:
        data = _deep_merge(data, dict(overrides))
    try:
        return Settings.model_validate(data)
    except PydanticValidationError as exc:
        raise ConfigError(_describe(exc)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, loaded once at start."""
    return load_settings()
