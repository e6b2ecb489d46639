"""compose/alerts.yml without promtool: it parses, Prometheus loads it (rule_files, mounted read-only
where prometheus.yml says), it has the alerts the operators asked for, and every vcm_*
family and label its expressions name is one vcm exposes (recorded, or read at scrape)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.compose import stack
from tests.compose.exposed import exposed_families
from vcm.workers import names

ALERTS_FILE = stack.COMPOSE_DIR / "alerts.yml"
WANTED = {
    "VcmSyncConflictRateHigh",
    "VcmSyncFailing",
    "VcmAgentOverMemoryQuota",
    "VcmSnapshotFailed",
    "VcmWriteBehindBacklogOld",
    "VcmWriteBehindWritingThrough",
}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS_FILE.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_prometheus_loads_the_rules_file_mounted_read_only() -> None:
    config = yaml.safe_load(stack.PROMETHEUS_FILE.read_text())
    (path,) = config["rule_files"]
    mounted = {m.target: m for m in stack.mounts(stack.services()["prometheus"])}
    assert path in mounted and mounted[path].read_only
    assert (stack.COMPOSE_DIR / mounted[path].source).resolve() == ALERTS_FILE


def test_the_alerts_asked_for_are_there_and_well_formed() -> None:
    rules = _rules()
    assert {r["alert"] for r in rules} == WANTED
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), rule["alert"]
    by_name = {r["alert"]: r["expr"] for r in rules}
    assert "0.05 *" in by_name["VcmSyncConflictRateHigh"]  # 5 % of syncs
    assert ">= 3" in by_name["VcmSyncFailing"]  # three in a row
    assert f'task="{names.SNAPSHOT}"' in by_name["VcmSnapshotFailed"]  # the periodic snapshot task
    assert "vcm_write_behind_backlog_age_seconds" in by_name["VcmWriteBehindBacklogOld"]


def test_every_family_and_label_the_rules_name_is_exposed() -> None:
    exposed = exposed_families()
    for rule in _rules():
        expr = rule["expr"]
        named = re.findall(r"\b(vcm_[a-z0-9_]+)(\{[^}]*\})?", expr)
        assert named, rule["alert"]
        for name, matchers in named:
            assert name in exposed, f"{rule['alert']}: no family exposes {name}"
            for label in re.findall(r"([a-z_]+)\s*=~?", matchers):
                assert label in exposed[name], f"{rule['alert']}: {name} has no label {label}"
        for label in re.findall(r"by \(([a-z_, ]+)\)", expr):
            for part in label.split(","):
                assert any(part.strip() in labels for labels in exposed.values()), part
