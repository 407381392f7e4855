"""``python -m modelserver`` as an operator meets it: what it says at start, and when it gives up."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.support.model_server import ROOT
from tests.support.timing import scaled


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


def test_the_server_says_where_it_serves_with_how_many_threads(model_server):
    log = model_server.log.read_text()
    assert f"on http://127.0.0.1:{model_server.port} (" in log
    assert " threads, context 4096, pid " in log
