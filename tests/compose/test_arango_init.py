"""compose/arango_init.py (the arangodb-init job), end to end over a Unix socket against a fake
arangod that keeps databases, users and grants (tests/compose/fake_arangod.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.compose import stack
from tests.compose.fake_arangod import FakeArangod
from vcm.errors import StoreUnavailable

ROOT_PW = "root-7f3a9c"
RW_PW = "rw-0b1d2e3f"
RO_PW = "ro-4a5b6c7d"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("arango_init", stack.COMPOSE_DIR / "arango_init.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


init = _load()


@pytest.fixture
def fake() -> Iterator[FakeArangod]:
    server = FakeArangod(ROOT_PW)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _env(socket_path: str, *, rw_pw: str = RW_PW, ro_pw: str = RO_PW, root_pw: str = ROOT_PW) -> dict[str, str]:
    return {
        "VCM_STORE_URL": f"arango+unix://vcm_rw:{rw_pw}@{socket_path}/vcm",
        "ARANGO_ROOT_PASSWORD": root_pw,
        "ARANGO_RW_USER": "vcm_rw",
        "ARANGO_RW_PASSWORD": rw_pw,
        "ARANGO_RO_USER": "vcm_ro",
        "ARANGO_RO_PASSWORD": ro_pw,
        "ARANGO_INIT_WAIT_S": "2",
    }


def test_a_fresh_server_gets_the_database_both_users_and_their_grants(
    fake: FakeArangod, capsys: pytest.CaptureFixture[str]
) -> None:
    assert init.main(_env(fake.socket_path)) == 0
    assert "vcm" in fake.databases
    assert fake.users["vcm_rw"] == {"passwd": RW_PW, "active": True}
    assert fake.users["vcm_ro"] == {"passwd": RO_PW, "active": True}
    assert fake.grants == {
        ("vcm_rw", "vcm", None): "rw",
        ("vcm_rw", "vcm", "*"): "rw",
        ("vcm_ro", "vcm", None): "ro",
        ("vcm_ro", "vcm", "*"): "ro",
    }
    # Both users really logged in to the database at the end.
    assert {u for m, p, u in fake.requests if p == "/_db/vcm/_api/collection"} == {"vcm_rw", "vcm_ro"}
    err = capsys.readouterr().err
    assert "ok: vcm ready" in err
    for secret in (ROOT_PW, RW_PW, RO_PW):
        assert secret not in err


def test_a_second_run_changes_nothing_but_applies_a_rotated_password(fake: FakeArangod) -> None:
    assert init.main(_env(fake.socket_path)) == 0
    assert init.main(_env(fake.socket_path, rw_pw="rw-rotated-99")) == 0
    assert fake.calls("POST", "/_db/_system/_api/database") == 1
    assert fake.calls("POST", "/_db/_system/_api/user") == 2
    assert fake.users["vcm_rw"]["passwd"] == "rw-rotated-99"
    assert fake.grants[("vcm_rw", "vcm", None)] == "rw"


def test_an_existing_database_is_kept(fake: FakeArangod) -> None:
    fake.databases.add("vcm")
    assert init.main(_env(fake.socket_path)) == 0
    assert fake.calls("POST", "/_db/_system/_api/database") == 0


def test_a_deactivated_user_is_reactivated(fake: FakeArangod) -> None:
    fake.users["vcm_ro"] = {"passwd": "old", "active": False}
    assert init.main(_env(fake.socket_path)) == 0
    assert fake.users["vcm_ro"] == {"passwd": RO_PW, "active": True}


def test_a_wrong_root_password_fails_at_once_with_a_hint(fake: FakeArangod, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(fake.socket_path, root_pw="not-the-root-password")
    env["ARANGO_INIT_WAIT_S"] = "30"
    assert init.main(env) == 1
    assert len(fake.requests) == 1  # the 401 is final: no retry within the 30 s wait
    assert "applied only when the arango_data volume is first created" in capsys.readouterr().err
    assert "vcm" not in fake.databases


def test_grants_that_do_not_stick_fail_the_verification(fake: FakeArangod, capsys: pytest.CaptureFixture[str]) -> None:
    fake.ignore_grants = True
    assert init.main(_env(fake.socket_path)) == 1
    assert "expected 'rw'" in capsys.readouterr().err


def test_the_server_is_awaited_until_it_answers() -> None:
    late = FakeArangod(ROOT_PW)  # its socket does not exist yet
    cfg = init.config_from_env(_env(late.socket_path))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            late.start()

    try:
        init.connect_root(cfg, sleep=sleep).close()
    finally:
        late.stop()
    assert len(sleeps) == 2


def test_an_absent_server_is_given_up_after_the_wait() -> None:
    cfg = init.config_from_env(_env("/nonexistent/vcm/arangod.sock"))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(StoreUnavailable):
        init.connect_root(cfg, sleep=sleep, clock=lambda: now[0])
    assert now[0] == pytest.approx(cfg.wait_s)


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"ARANGO_ROOT_PASSWORD": ""}, "ARANGO_ROOT_PASSWORD"),
        ({"ARANGO_RO_PASSWORD": ""}, "ARANGO_RO_PASSWORD"),
        ({"VCM_STORE_URL": ""}, "VCM_STORE_URL"),
        ({"ARANGO_RO_PASSWORD": "change-me-arango-ro"}, "ARANGO_RO_PASSWORD"),
        ({"ARANGO_RW_PASSWORD": "pw/with/slashes"}, "URL-safe"),
        ({"ARANGO_RW_USER": "someone_else"}, "ARANGO_RW_USER"),
        ({"ARANGO_RO_USER": "vcm_rw"}, "two different users"),
        ({"ARANGO_RO_USER": "root"}, "must not be root"),
        ({"VCM_STORE_URL": f"arango+http://vcm_rw:{RW_PW}@arangodb:8529/vcm"}, "arango+unix://"),
        ({"VCM_STORE_URL": f"arango+unix://vcm_rw:{RW_PW}@/run/arangodb/arangod.sock/_system"}, "name the database"),
        ({"VCM_STORE_URL": f"arango+unix://vcm_rw:{RW_PW}@/run/arangodb/arangod.sock"}, "name the database"),
        ({"VCM_STORE_URL": "mysql://x"}, "VCM_STORE_URL"),
        ({"ARANGO_INIT_WAIT_S": "soon"}, "ARANGO_INIT_WAIT_S"),
    ],
)
def test_bad_configuration_stops_before_any_request(
    change: dict[str, str], names: str, fake: FakeArangod, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _env(fake.socket_path)
    if "ARANGO_RW_PASSWORD" in change:  # keep the URL as a naive template would build it
        env["VCM_STORE_URL"] = f"arango+unix://vcm_rw:{change['ARANGO_RW_PASSWORD']}@{fake.socket_path}/vcm"
    env.update(change)
    assert init.main(env) == 2
    assert names in capsys.readouterr().err
    assert fake.requests == []


def test_the_compose_environment_of_the_init_job_is_accepted() -> None:
    env = stack.resolved_environment("arangodb-init")
    placeholders = {k: v.replace("change-me", "generated") for k, v in env.items()}
    cfg = init.config_from_env(placeholders)
    assert cfg.database == "vcm"
    assert cfg.socket_url == "arango+unix:///run/arangodb/arangod.sock"
    assert (cfg.rw.name, cfg.ro.name) == ("vcm_rw", "vcm_ro")
    with pytest.raises(init.InitConfigError):  # and the .env.example placeholders are refused
        init.config_from_env(env)
