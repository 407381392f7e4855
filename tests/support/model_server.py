"""The bundled model server in a process of its own, as the tests' LLM: the embedded model and Ollama's stand-in.

Ollama cannot run here, so the tests put the bundled model server
(``python -m modelserver``) at that boundary too: it speaks Ollama's API, so the
official client, httpx and the gateway's error mapping all run for real against
it. It answers to the embedded model's name and to ``SERVED_MODEL`` (an
"Ollama" model), and with ``--test-controls`` it misbehaves on request: drop a
stream half-way, answer slowly, fail with a status, hold generations until
released, answer with a canned text (or canned texts in turn: ``canned_replies``;
cut at ``num_predict`` tokens and counted as the model's own reply would be), or
report another parameter size for a model name (``parameter_sizes``).
One server (one loaded model) serves the whole run, supervised, so a test can
kill it and see it come back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engine.llm.embedded import MODEL_NAME as EMBEDDED_MODEL
from tests.support.timing import scaled, wait_until

# The seed of the tests' model servers (``--seed``): a request that sets none gets the same reply each time.
TEST_SEED = 1234

ROOT = Path(__file__).resolve().parents[2]
SERVED_MODEL = "smollm2:135m"
# The same model under a name whose tag says nothing of its size: only /api/show tells it.
UNTAGGED_MODEL = "house-model:latest"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """A generation the server finished: sent whole, or cancelled because its client went away."""

    last_message: str
    priority: str
    done_reason: str
    prompt_tokens: int
    completion_tokens: int
    server_seconds: float
    model_seconds: float


class RemoteList(list[dict[str, Any]]):
    """The requests the server has seen; ``clear`` forgets them on the server too."""

    def __init__(self, items: list[dict[str, Any]], server: ModelServerProcess) -> None:
        super().__init__(items)
        self._server = server

    def clear(self) -> None:
        super().clear()
        self._server.control("clear")


class Behaviour:
    """Sets the server's behaviour attribute by attribute (``server.behaviour.fail_status = 500``)
    and reads what it recorded (``requests``, ``served``, ``waiting``)."""

    _server: ModelServerProcess

    def __init__(self, server: ModelServerProcess) -> None:
        object.__setattr__(self, "_server", server)

    def __setattr__(self, name: str, value: Any) -> None:
        self._server.control("behaviour", {name: value})

    @property
    def requests(self) -> RemoteList:
        return RemoteList(self._server.record()["requests"], self._server)

    @property
    def served(self) -> list[Served]:
        return [Served(**entry) for entry in self._server.record()["served"]]

    @property
    def waiting(self) -> int:
        return int(self._server.record()["waiting"])


class ModelServerProcess:
    """``python -m modelserver --supervise --test-controls`` on a port of its own."""

    def __init__(self, *, log: Path, n_ctx: int = 4096, seed: int | None = TEST_SEED) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.n_ctx = n_ctx
        # The tests' replies are repeatable: every request without a seed of its own gets this one.
        self.seed = seed
        self.behaviour = Behaviour(self)
        self._http = httpx.Client(base_url=self.url, timeout=scaled(30))
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ModelServerProcess:
        """Start it (again, after ``stop``, on the same port)."""
        if self._http.is_closed:
            self._http = httpx.Client(base_url=self.url, timeout=scaled(30))
        command = [
            sys.executable, "-m", "modelserver", "--supervise", "--test-controls",
            "--port", str(self.port), "--n-ctx", str(self.n_ctx),
            "--name", EMBEDDED_MODEL, "--name", SERVED_MODEL, "--name", UNTAGGED_MODEL,
        ]  # fmt: skip
        if self.seed is not None:
            command += ["--seed", str(self.seed)]
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.wait_ready()
        return self

    def wait_ready(self, *, timeout: float = 120) -> int:
        """Wait until the server answers; its pid."""

        def answers() -> int | None:
            assert self._process is not None
            assert self._process.poll() is None, f"the model server supervisor exited: {self.log.read_text()[-2000:]}"
            try:
                return int(self._http.get("/api/version", timeout=2).json()["pid"])
            except httpx.HTTPError:
                return None

        return int(wait_until(answers, timeout=timeout, what=f"the model server at {self.url}", interval=0.1))

    def wait_idle(self, *, timeout: float = 120) -> None:
        """Wait until no generation is under way: one another test left running (a title written in
        the background) shares the model's batches, which changes its arithmetic slightly."""
        wait_until(lambda: self.record()["in_flight"] == 0, timeout=scaled(timeout), what="the model server to be idle")

    def server_pid(self) -> int:
        return self.wait_ready()

    def kill_server(self) -> int:
        """``kill -9`` the model server itself (the supervisor starts it again); the pid it had."""
        pid = self.server_pid()
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=scaled(30))
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._http.close()

    def control(self, action: str, body: dict[str, Any] | None = None) -> None:
        response = self._http.post(f"/_test/{action}", json=body or {})
        response.raise_for_status()

    def record(self) -> dict[str, Any]:
        response = self._http.get("/_test/record")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def reset(self) -> None:
        """Behave normally again, forget what was recorded, and let any held generation go
        (once the server answers: a test may have just killed it)."""
        self.wait_ready()
        self.control("reset")

    def release(self) -> None:
        """Let the held generations go."""
        self.control("release")

    def hold(self) -> Hold:
        """Generations from now on wait until the returned hold is ``set``."""
        hold = Hold(self)
        hold.clear()
        return hold


class Hold:
    """Like a ``threading.Event`` a generation waits for: ``set`` lets them go, ``clear`` holds the next ones."""

    def __init__(self, server: ModelServerProcess) -> None:
        self._server = server

    def set(self) -> None:
        self._server.release()

    def clear(self) -> None:
        self._server.control("behaviour", {"hold": True, "hold_seconds": scaled(120)})
