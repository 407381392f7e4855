"""``python -m modelserver`` as an operator meets it: what it says at start, and when it gives up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from tests.support.model_server import ROOT, ModelServerProcess
from tests.support.timing import scaled, wait_until


def test_a_busy_port_is_named_and_the_supervisor_does_not_retry_forever():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "modelserver", "--supervise", "--port", str(port), "--n-ctx", "512"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=scaled(120),
            check=False,
        )
    assert run.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in run.stderr
    assert "starting it again" not in run.stderr


def test_the_server_says_where_it_serves_with_how_many_threads_and_slots(model_server):
    log = model_server.log.read_text()
    assert f"on http://127.0.0.1:{model_server.port} (" in log
    assert " threads, 5 turn slots, context 4096, pid " in log


def test_a_killed_supervisor_takes_its_model_server_with_it(tmp_path):
    """A supervisor killed with ``kill -9`` (no chance to stop its child) must not leave an orphan
    model server holding the port and the model's memory."""
    server = ModelServerProcess(log=tmp_path / "modelserver.log", n_ctx=512).start()
    try:
        child = server.server_pid()
        assert server._process is not None
        server._process.send_signal(signal.SIGKILL)
        server._process.wait()

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            with open(f"/proc/{child}/stat") as stat:  # a zombie waiting for init to reap it is gone too
                return stat.read().split(")")[-1].split()[0] == "Z"

        wait_until(gone, timeout=30, what="the orphaned model server to stop")
    finally:
        server.stop()
