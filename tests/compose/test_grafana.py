"""compose/grafana without a Grafana server: the provisioning files parse and point at what the
stack mounts, the dashboard is well-formed, shows what operators asked for, and every family and
label its queries name is one vcm (or Flower) exposes."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.compose import stack
from tests.compose.exposed import exposed_families, flower_families
from vcm.workers import names

GRAFANA = stack.COMPOSE_DIR / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "vcm.json"
# What the board must show (issue text): each a panel title's words.
WANTED = ("tokens by part", "appends and evictions", "backlog and dead letters", "eviction job latency",
          "recall and archival", "drift", "heartbeat", "sync")  # fmt: skip


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _dashboard()["panels"] for t in p["targets"]]


def test_grafana_is_provisioned_from_the_mounted_files_with_prometheus_as_its_source() -> None:
    service = stack.services()["grafana"]
    mounted = {m.target: m for m in stack.mounts(service)}
    provisioning = mounted["/etc/grafana/provisioning"]
    boards = mounted["/var/lib/grafana/dashboards"]
    assert provisioning.read_only and boards.read_only
    assert (stack.COMPOSE_DIR / provisioning.source).resolve() == (GRAFANA / "provisioning").resolve()
    assert (stack.COMPOSE_DIR / boards.source).resolve() == DASHBOARD.parent.resolve()
    (source,) = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((GRAFANA / "provisioning/dashboards/vcm.yml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    # Every panel reads that source, by the uid the provisioning gives it.
    for panel in _dashboard()["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
    # Its admin password is the stack's admin token, from the secret, never in the file.
    assert service["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/secrets/vcm_admin_token"
    assert {s["source"] for s in service["secrets"]} == {"vcm_admin_token"}


def test_the_dashboard_shows_what_operators_asked_for() -> None:
    board = _dashboard()
    titles = [p["title"].lower() for p in board["panels"]]
    for wanted in WANTED:
        assert any(wanted in t for t in titles), f"no panel for {wanted}"
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids) and board["uid"] == "vcm-overview"
    for title, expr in _queries():
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), title
    evictions = [e for t, e in _queries() if "eviction job latency" in t.lower()]
    assert evictions and all(f'task="{names.EVICT}"' in e for e in evictions)


def test_every_family_and_label_the_dashboard_queries_is_exposed() -> None:
    exposed = {**exposed_families(), **flower_families()}
    for title, expr in _queries():
        named = re.findall(r"\b((?:vcm|flower)_[a-z0-9_]+)(\{[^}]*\})?", expr)
        assert named, title
        for name, matchers in named:
            assert name in exposed, f"{title}: no family exposes {name}"
            for label in re.findall(r"([a-z_]+)\s*=~?", matchers):
                assert label in exposed[name], f"{title}: {name} has no label {label}"
        used = {n for n, _ in named}
        for group in re.findall(r"by \(([a-z_, ]+)\)", expr):
            for label in (part.strip() for part in group.split(",")):
                assert any(label in exposed[n] for n in used), f"{title}: no family of it has label {label}"
    # The agent picker lists the label of the per-agent token gauge.
    (variable,) = _dashboard()["templating"]["list"]
    assert "agent" in exposed["vcm_context_tokens"] and "vcm_context_tokens, agent" in variable["definition"]
