"""Security settings: secrets only from the environment and never printed, the UDS guard in
`vcm doctor`, the vector-index guard report, store credentials wired to the adapter."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vcm.cli import doctor as cli_doctor
from vcm.cli.doctor import doctor_checks, guard_summary, transport_check
from vcm.errors import ConfigError, ErrorCode
from vcm.settings import load_settings, redact_url
from vcm.store.arango.guard import GuardReport, Problem
from vcm.workers.runtime import store_options

SECRET = "s3cr3t-Pa55word-xyz"
TOKEN = "admin-token-0123456789-abcdef"


def secret_env() -> dict[str, str]:
    return {
        "VCM_STORE_URL": f"arango+http://vcm_rw:{SECRET}@127.0.0.1:1/vcm",
        "VCM_STORE__PASSWORD": SECRET,
        "VCM_STORE__RO_PASSWORD": SECRET + "-ro",
        "VCM_API__ADMIN_TOKEN": TOKEN,
        "VCM_BROKER_URL": f"redis://:{SECRET}@127.0.0.1:1/0",
    }


@pytest.mark.parametrize(
    ("toml", "setting"),
    [
        ('[store]\npassword = "hunter2hunter2"\n', "store.password"),
        ('[store]\nro_password = "hunter2hunter2"\n', "store.ro_password"),
        ('[api]\nadmin_token = "0123456789abcdef0123"\n', "api.admin_token"),
        ('store_url = "arango+http://root:hunter2hunter2@db:8529/vcm"\n', "store_url"),
        ('redis_url = "redis://:hunter2hunter2@redis:6379/0"\n', "redis_url"),
    ],
)
def test_a_secret_in_a_config_file_is_refused_naming_the_setting(tmp_path: Path, toml: str, setting: str) -> None:
    path = tmp_path / "vcm.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={"VCM_CONFIG": str(path)})
    assert refused.value.code == ErrorCode.CONFIG_ERROR
    assert setting in refused.value.message and "environment" in refused.value.message
    assert "hunter2" not in refused.value.message and "0123456789abcdef" not in refused.value.message


def test_the_same_secrets_from_the_environment_are_accepted_and_never_in_reprs() -> None:
    settings = load_settings(environ=secret_env())
    assert settings.store.password.get_secret_value() == SECRET
    for text in (repr(settings), str(settings), repr(settings.store), f"{settings}", repr(settings.worker)):
        assert SECRET not in text and TOKEN not in text
    assert "vcm_rw:***@127.0.0.1:1" in repr(settings)
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert redact_url("amqp://u:p%40ss@h/v") == "amqp://u:***@h/v"


def test_doctor_output_never_contains_a_secret(monkeypatch: pytest.MonkeyPatch, capsys: Any, caplog: Any) -> None:
    stub = SimpleNamespace(model_id="stub", dimension=3, max_tokens=8)
    monkeypatch.setattr("vcm.tasks.embedding.get_embedder", lambda _: stub)
    settings = load_settings(overrides={"store": {"uds_only": True}}, environ=secret_env())
    monkeypatch.setattr(cli_doctor, "get_settings", lambda: settings)
    caplog.set_level(logging.DEBUG)

    code = cli_doctor.cmd_doctor(SimpleNamespace(strict=True))

    out = capsys.readouterr()
    printed = out.out + out.err + caplog.text
    assert code == 1 and "arango transport" in printed and "uds_only" in printed
    assert SECRET not in printed and TOKEN not in printed


def test_uds_guard_in_doctor() -> None:
    def check(url: str, *, uds_only: bool, strict: bool) -> bool:
        settings = load_settings(overrides={"store_url": url, "store": {"uds_only": uds_only}}, environ={})
        return transport_check(settings, strict=strict)[1]

    tcp, unix = "arango+http://db:8529/vcm", "arango+unix:///run/arangodb/arangod.sock"
    assert check(tcp, uds_only=False, strict=False) is True
    assert check(tcp, uds_only=False, strict=True) is False
    assert check(tcp, uds_only=True, strict=False) is False  # uds_only alone fails a TCP endpoint
    assert check(unix, uds_only=True, strict=True) is True


def test_doctor_wants_a_separate_read_only_user_under_strict() -> None:
    base = {"store_url": "arango+unix://vcm_rw@/run/arangodb/arangod.sock/vcm"}
    alone = load_settings(overrides=base, environ={})
    both = load_settings(overrides={**base, "store": {"ro_username": "vcm_ro"}}, environ={})
    same = load_settings(overrides={**base, "store": {"ro_username": "vcm_rw"}}, environ={})
    assert cli_doctor.users_check(alone, strict=False)[1] is True
    assert cli_doctor.users_check(alone, strict=True)[1] is False
    assert cli_doctor.users_check(same, strict=True)[1] is False
    assert cli_doctor.users_check(both, strict=True) == (
        "arango users",
        True,
        "writes as vcm_rw, reads as vcm_ro (read-only)",
    )


def load_tcp() -> Any:
    return load_settings(overrides={"store_url": "arango+unix://u@/nonexistent/arangod.sock/vcm"}, environ={})


def test_doctor_reports_the_vector_index_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "vcm.tasks.embedding.get_embedder", lambda _: SimpleNamespace(model_id="m", dimension=1, max_tokens=1)
    )
    report = GuardReport("3.12.5", True, "probe", [Problem(ErrorCode.CONFIG_ERROR, "sparse unsupported", fatal=False)])
    assert guard_summary(report) == "ArangoDB 3.12.5, vector index on (by probe); sparse unsupported"
    assert guard_summary(GuardReport("3.12.6", None, "skipped")) == "ArangoDB 3.12.6, vector index unknown (by skipped)"
    rows = {name: (ok, detail) for name, ok, detail in doctor_checks(load_tcp(), strict=False)}
    assert rows["arango guard"][0] is False and "did not open" in rows["arango guard"][1]


def test_store_options_carry_both_users_and_retention() -> None:
    env = {
        "VCM_STORE_URL": "arango+unix:///run/arangodb/arangod.sock/vcm",
        "VCM_STORE__USERNAME": "vcm_rw",
        "VCM_STORE__PASSWORD": "rw-pass-123",
        "VCM_STORE__RO_USERNAME": "vcm_ro",
        "VCM_STORE__RO_PASSWORD": "ro-pass-456",
        "VCM_STORE__UDS_ONLY": "true",
        "VCM_MAINTENANCE__RECALL_TTL_S": "86400",
    }
    assert store_options(load_settings(environ=env)) == {
        "uds_only": True,
        "retention": True,
        "username": "vcm_rw",
        "password": "rw-pass-123",
        "ro_username": "vcm_ro",
        "ro_password": "ro-pass-456",
    }
    # the embedded adapter takes only its recall tail bound
    assert store_options(load_settings(environ={})) == {"recall_tail_limit": 5_000}
    plain = store_options(load_settings(environ={"VCM_STORE_URL": "arango+http://u:p@db/vcm"}))
    assert plain == {"uds_only": False, "retention": False}
