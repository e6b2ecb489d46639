"""Readers for compose/ shared by the compose tests: the compose file (anchors and merges resolved
by PyYAML), Compose-style ``${VAR}`` interpolation against .env.example, and the Dockerfile."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
DOCKERFILE = COMPOSE_DIR / "Dockerfile"
DOCKERIGNORE = COMPOSE_DIR / "Dockerfile.dockerignore"
PROMETHEUS_FILE = COMPOSE_DIR / "prometheus.yml"
ENV_EXAMPLE = ROOT / ".env.example"

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@cache
def raw_text() -> str:
    return COMPOSE_FILE.read_text()


@cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(raw_text())
    assert isinstance(data, dict)
    return data


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


@cache
def env_example() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f".env.example: not NAME=value: {line!r}"
        values[name.strip()] = value.strip()
    return values


def strings(value: Any) -> list[str]:
    """Every string in a parsed YAML document (keys and values; comments are gone)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def variables_used() -> set[str]:
    """Variables Compose interpolates: those in the file's strings, not in its comments."""
    return {m.group(1) for text in strings(compose()) for m in VAR.finditer(text)}


class MissingVariable(LookupError):
    pass


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's interpolation of one value (recursively through lists and mappings)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        current = env.get(name)
        unset_or_empty = current is None or (current == "" and op is not None and op.startswith(":"))
        if op in (":-", "-") and unset_or_empty:
            return arg
        if op in (":?", "?") and unset_or_empty:
            raise MissingVariable(f"{name}: {arg}")
        return current or ""

    return VAR.sub(one, value)


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment (mapping or list form) as written, values as strings."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def resolved_environment(name: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    values = env_example() if env is None else env
    return {k: str(interpolate(v, values)) for k, v in environment(services()[name]).items()}


def command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def vcm_services() -> dict[str, dict[str, Any]]:
    """Services that run from the vcm image (those started by one of our scripts)."""
    return {n: s for n, s in services().items() if command(s) and command(s)[0].startswith("start-")}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool
    kind: str  # "volume" | "bind"


def mounts(service: Mapping[str, Any]) -> list[Mount]:
    out = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            parts = entry.split(":")
            source, target = parts[0], parts[1]
            ro = len(parts) > 2 and "ro" in parts[2].split(",")
        else:
            source, target, ro = entry["source"], entry["target"], bool(entry.get("read_only"))
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append(Mount(source, target, ro, kind))
    return out


# --- Dockerfile ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


@cache
def dockerfile() -> tuple[Instruction, ...]:
    logical: list[str] = []
    buffer = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        logical.append(buffer + stripped)
        buffer = ""
    assert not buffer, "Dockerfile ends inside a continued line"
    result = []
    for item in logical:
        keyword, _, args = item.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    return tuple(result)


def instructions(keyword: str) -> list[str]:
    return [i.args for i in dockerfile() if i.keyword == keyword]


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    dest: str
    flags: tuple[str, ...]


def copies() -> list[Copy]:
    out = []
    for args in instructions("COPY"):
        words = args.split()
        flags = tuple(w for w in words if w.startswith("--"))
        paths = [w for w in words if not w.startswith("--")]
        out.append(Copy(tuple(paths[:-1]), paths[-1], flags))
    return out
