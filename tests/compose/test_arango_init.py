"""compose/arango_init.py (the arangodb-init job), end to end over a Unix socket against a fake
arangod that keeps databases, users and grants (tests/compose/fake_arangod.py)."""

from __future__ import annotations

import importlib.util
import os
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
        # FakeArangod's listener tables (its "network namespace"), beside its socket
        "ARANGO_INIT_NET_DIR": os.path.join(os.path.dirname(socket_path), "net"),
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
    assert "rollout guard: ok" in err
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


# --- the rollout guard (step 0) -------------------------------------------------------------------------
def _nothing_created(fake: FakeArangod) -> bool:
    return "vcm" not in fake.databases and set(fake.users) == {"root"} and fake.grants == {}


@pytest.mark.parametrize(
    ("address", "port"),
    [("127.0.0.1", 8529), ("0.0.0.0", 8529), ("::", 8529), ("127.0.0.1", 8999)],
)
def test_a_tcp_listener_in_arangods_namespace_stops_the_job_before_it_creates_anything(
    address: str, port: int, fake: FakeArangod, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.listen_tcp(address, port)
    assert init.main(_env(fake.socket_path)) == 3
    err = capsys.readouterr().err
    assert "rollout guard: a TCP listener in arangod's network namespace: " in err
    assert f":{port}" in err and "not UDS-only" in err
    assert _nothing_created(fake)


@pytest.mark.parametrize(("socket_mode", "dir_mode"), [(0o755, 0o700), (0o666, 0o700), (0o660, 0o755)])
def test_a_socket_or_directory_open_to_others_stops_the_job(
    socket_mode: int, dir_mode: int, fake: FakeArangod, capsys: pytest.CaptureFixture[str]
) -> None:
    os.chmod(fake.socket_path, socket_mode)
    os.chmod(fake.directory, dir_mode)
    assert init.main(_env(fake.socket_path)) == 3
    err = capsys.readouterr().err
    expected = "must be 0660" if socket_mode != 0o660 else "must be 0700"
    assert expected in err
    assert _nothing_created(fake)


def test_unreadable_listener_tables_stop_the_job(fake: FakeArangod, capsys: pytest.CaptureFixture[str]) -> None:
    env = _env(fake.socket_path)
    env["ARANGO_INIT_NET_DIR"] = os.path.join(fake.directory, "no-such-dir")
    assert init.main(env) == 3
    assert "cannot read the TCP listeners" in capsys.readouterr().err
    assert _nothing_created(fake)


def test_the_compose_init_job_reads_the_listeners_of_arangods_namespace() -> None:
    env = stack.resolved_environment("arangodb-init")
    cfg = init.config_from_env({k: v.replace("change-me", "generated") for k, v in env.items()})
    assert cfg.net_dir == "/proc/net" and cfg.socket_path == "/run/arangodb/arangod.sock"
    assert stack.services()["arangodb-init"]["network_mode"] == "service:arangodb"
