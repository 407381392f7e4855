"""``python -m modelserver``: serve the bundled model over Ollama's API.

With ``--supervise`` it runs the server as a child process and starts it again
whenever it dies (a crash of the native library, ``kill -9``, the OOM killer),
so the web server and the workers, which only talk to it over HTTP, see a
failed request and then a working server again.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from modelserver.engine import Engine, EngineError
from modelserver.portability import missing_cpu_flags
from modelserver.server import ModelServer

DEFAULT_PORT = 11435
DEFAULT_NAME = "embedded/smollm2-135m"
# Exit codes after which the supervisor does not try again: a clean stop, and a setting or
# a machine that cannot work (a busy port, a CPU without AVX2).
DONE, CANNOT_SERVE = 0, 2
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

logger = logging.getLogger("modelserver")


def physical_cores() -> int:
    """Cores, not hardware threads: llama.cpp gains nothing from a core's second thread."""
    usable = os.sched_getaffinity(0)
    cores: set[tuple[str, str]] = set()
    for cpu in usable:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            return len(usable)
        cores.add((package, core))
    return max(1, len(cores))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m modelserver", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("OLLM_MODEL_SERVER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("OLLM_MODEL_SERVER_PORT", DEFAULT_PORT)))
    parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OLLM_MODEL_THREADS", "0")),
        help="threads for generation (default: the machine's physical cores)",
    )
    parser.add_argument("--n-ctx", type=int, default=int(os.environ.get("OLLM_EMBEDDED_N_CTX", "8192")))
    parser.add_argument(
        "--name", action="append", dest="names", help=f"a name the model answers to (default {DEFAULT_NAME})"
    )
    parser.add_argument(
        "--background-max-wait",
        type=float,
        default=float(os.environ.get("OLLM_BACKGROUND_MAX_WAIT_SECONDS", "15")),
        help="the longest a summary pauses for chat turns in all (seconds)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=int(os.environ["OLLM_MODEL_SEED"]) if os.environ.get("OLLM_MODEL_SEED") else None,
        help="the seed of every request that sets none (default: a fresh one per request)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=int(os.environ.get("OLLM_MODEL_SLOTS", "5")),
        help="chat turns generated at once, in one batch (a summary has a slot besides)",
    )
    parser.add_argument("--test-controls", action="store_true", help="accept the tests' /_test/ requests")
    parser.add_argument("--supervise", action="store_true", help="run the server as a child and restart it")
    args = parser.parse_args(argv)
    args.names = tuple(args.names or (DEFAULT_NAME,))
    return args


def _die_with_parent() -> None:
    """In the child, before it runs: the kernel sends it SIGTERM when the supervisor dies, however
    it dies (a ``kill -9`` of the supervisor must not leave a model server holding the port)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def supervise(argv: list[str]) -> int:
    """Run ``python -m modelserver`` (without ``--supervise``) until it stops on purpose."""
    child_argv = [sys.executable, "-m", "modelserver", *(arg for arg in argv if arg != "--supervise")]
    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = 0.5
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(child_argv, preexec_fn=_die_with_parent)
        if stopping:  # told to stop while starting it
            child.terminate()
        code = child.wait()
        if stopping or code in (DONE, CANNOT_SERVE):
            return DONE if stopping else code
        if time.monotonic() - started > 30:
            backoff = 0.5
        reason = f"signal {-code}" if code < 0 else f"exit code {code}"
        logger.warning("the model server died (%s); starting it again in %.1f s", reason, backoff)
        time.sleep(backoff)
        backoff = min(backoff * 2, 10.0)
    return DONE


def cpu_problem(cpuinfo: str) -> str | None:
    """What keeps the bundled model off this CPU (from /proc/cpuinfo's text), or None."""
    missing = missing_cpu_flags(cpuinfo)
    if not missing:
        return None
    return (
        f"this CPU lacks {', '.join(missing)}: the bundled model needs an x86-64 CPU with AVX2 "
        "(Intel Haswell, AMD Zen or newer). Use Ollama instead: OLLM_LLM_BACKEND=ollama."
    )


def serve(args: argparse.Namespace) -> int:
    cpuinfo = Path("/proc/cpuinfo")
    problem = cpu_problem(cpuinfo.read_text() if cpuinfo.exists() else "")
    if problem is not None:
        logger.error("%s", problem)
        return CANNOT_SERVE
    threads = args.threads or physical_cores()
    try:
        engine = Engine(
            n_ctx=args.n_ctx,
            n_threads=threads,
            background_max_wait=args.background_max_wait,
            seed=args.seed,
            turn_slots=args.slots,
        )
    except EngineError as exc:
        logger.error("%s", exc)
        return CANNOT_SERVE
    try:
        server = ModelServer(engine, host=args.host, port=args.port, names=args.names, test_controls=args.test_controls)
    except OSError as exc:
        logger.error("cannot listen on %s:%s: %s", args.host, args.port, exc)
        return CANNOT_SERVE
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(DONE))
    logger.info(
        "serving %s on http://%s:%s (%d threads, %d turn slots, context %d, pid %d)",
        ", ".join(args.names),
        args.host,
        server.port,
        threads,
        args.slots,
        args.n_ctx,
        os.getpid(),
    )
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        engine.close()
    return DONE


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="modelserver: %(message)s")
    args = parse(argv)
    return supervise(argv) if args.supervise else serve(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
