"""The bundled model server for one benchmark: ``python -m modelserver --test-controls`` on a free port.

The app reaches the model only over HTTP now, so every benchmark that runs the
model starts a server of its own (never the one ``make run`` keeps on 11435)
and points the app's gateway at it. It runs without ``--supervise``: a server
that died mid-benchmark must fail the benchmark, not come back and skew the
figures. ``--test-controls`` makes it record each finished generation with its
own timings (``served``), which the benchmarks read instead of the in-process
backend's results they used to.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

import httpx

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks run as scripts from bench/: the project's packages (tests.support among them) sit one up.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.llm.embedded import MODEL_NAME  # noqa: E402
from tests.support.model_server import Served, free_port  # noqa: E402
from tests.support.timing import wait_until  # noqa: E402

# Repeatable replies: a request that sets no seed gets this one.
BENCH_SEED = 1234

# The server logs the threads it settled on ("... (2 threads, 4 turn slots, context 8192, pid 123)").
THREADS_LOGGED = re.compile(r"\((\d+) threads, ")


class BenchModelServer:
    """The model server answering to the embedded model's name; use it as a context manager."""

    def __init__(self, *, n_ctx: int = 8192, threads: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.n_ctx = n_ctx
        self.threads = threads
        self.log = Path(tempfile.mkdtemp(prefix="bench-modelserver-")) / "modelserver.log"
        self._http = httpx.Client(base_url=self.url, timeout=30)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> BenchModelServer:
        command = [
            sys.executable, "-m", "modelserver", "--test-controls", "--port", str(self.port),
            "--n-ctx", str(self.n_ctx), "--name", MODEL_NAME, "--seed", str(BENCH_SEED),
        ]  # fmt: skip
        if self.threads is not None:
            command += ["--threads", str(self.threads)]
        # A crash in the native library then leaves every thread's Python stack in the log.
        env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_until(self._answers, timeout=120, what=f"the model server at {self.url}", interval=0.1)
        except BaseException:
            self.stop()  # a server that never answered must not outlive the benchmark
            raise
        return self

    def _answers(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(f"the model server exited with code {self._process.returncode} as it started")
        try:
            return self._http.get("/api/version", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def threads_used(self) -> int:
        """The generation threads the server chose (its ``--threads``, else its default) as it logged them."""
        match = THREADS_LOGGED.search(self.log.read_text())
        if match is None:
            raise RuntimeError(f"the model server did not log its thread count: {self.log.read_text()[-2000:]}")
        return int(match.group(1))

    def served(self) -> list[Served]:
        """The generations the server finished since the last ``clear``, oldest first."""
        response = self._http.get("/_test/record")
        response.raise_for_status()
        return [Served(**entry) for entry in response.json()["served"]]

    def wait_served(self, count: int) -> list[Served]:
        """The generations finished since the last ``clear`` once there are ``count`` of them.

        The server records a generation after its last byte is sent, so a client that has
        read the whole reply can ask a moment before the record is there."""

        def recorded() -> list[Served] | None:
            served = self.served()
            return served if len(served) >= count else None

        served: list[Served] = wait_until(
            recorded, timeout=10, what=f"{count} generations recorded by the model server", interval=0.01
        )
        return served

    def clear(self) -> None:
        """Forget what the server recorded (it keeps every request body until told to)."""
        self._http.post("/_test/clear", json={}).raise_for_status()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            # It died on its own (and the benchmark's requests with it): say how, and what it logged.
            print(
                f"the model server had exited with code {self._process.returncode}; its log ({self.log}) ends:\n"
                f"{self.log.read_text()[-3000:]}",
                file=sys.stderr,
            )
        elif self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._http.close()

    def __enter__(self) -> BenchModelServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
