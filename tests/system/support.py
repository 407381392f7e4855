"""What the system tests drive real processes with: a minimal websocket client, process
starters, a TCP proxy that can cut a connection, and direct SQL on the test database.

Everything talks over 127.0.0.1 only, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from tests.support.timing import scaled, wait_until

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Proc:
    """A process this test run started (its own process group), with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group (a worker and its pool children)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def children(self) -> list[int]:
        """Pids of this process's direct children (a prefork worker's pool processes)."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []


def spawn(name: str, argv: list[str], env: dict[str, str], logdir: Path) -> Proc:
    log = logdir / f"{name}.log"
    with log.open("ab") as out:
        popen = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, popen, log)


def start_daphne(name: str, env: dict[str, str], logdir: Path) -> tuple[Proc, int]:
    port = free_port()
    proc = spawn(
        name, [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "ollm_site.asgi:application"], env, logdir
    )
    return proc, port


def wait_daphne(proc: Proc, port: int, timeout: float = 60) -> None:
    def up() -> bool:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited: {proc.output()[-3000:]}")
        return port_open(port)

    wait_until(up, timeout=timeout, what=f"{proc.name} to listen on {port}", interval=0.2)


def start_worker(name: str, env: dict[str, str], logdir: Path, *, pool: str = "solo", queue: str = "") -> Proc:
    argv = [str(BIN / "celery"), "-A", "ollm_site", "worker", "--pool", pool, "-n", f"{name}@%h", "--loglevel", "INFO"]
    if queue:
        argv += ["--queues", queue]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    if pool == "prefork":
        argv += ["--concurrency", "1"]
    return spawn(name, argv, env, logdir)


def wait_worker(proc: Proc, timeout: float = 60) -> None:
    def ready() -> bool:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited: {proc.output()[-3000:]}")
        return " ready." in proc.output()

    wait_until(ready, timeout=timeout, what=f"{proc.name} to be ready", interval=0.2)


# --- the database ------------------------------------------------------------------------------


def sql(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit; its rows (none for a statement that returns none)."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description is not None else []


@dataclass(frozen=True)
class SessionState:
    """Everything a half-applied compression would change, read straight from the database."""

    messages: tuple[tuple[Any, ...], ...]
    checkpoints: int
    compression_count: int
    compressed_through: int


def session_state(dsn: str, session_id: str) -> SessionState:
    messages = sql(
        dsn,
        "SELECT id, role, content, compressed_into_id, excluded_from_context FROM chat_message "
        "WHERE session_id = %s ORDER BY position",
        (session_id,),
    )
    checkpoints = sql(dsn, "SELECT count(*) FROM contextmgr_checkpoint WHERE session_id = %s", (session_id,))
    row = sql(dsn, "SELECT compression_count, compressed_through FROM chat_session WHERE id = %s", (session_id,))
    return SessionState(tuple(messages), int(checkpoints[0][0]), int(row[0][0]), int(row[0][1]))


def event_types(dsn: str, session_id: str) -> list[str]:
    return [
        r[0]
        for r in sql(dsn, "SELECT type FROM contextmgr_contextevent WHERE session_id = %s ORDER BY id", (session_id,))
    ]


def lease_held(dsn: str, session_id: str) -> bool:
    row = sql(dsn, "SELECT compression_started_at IS NOT NULL FROM chat_session WHERE id = %s", (session_id,))
    return bool(row[0][0])


# --- a minimal websocket client (RFC 6455, text frames) ----------------------------------------

MSG_ID = re.compile(r'id="msg-(\d+)"')
DELTA = re.compile(r'<div id="(reply-\d+)-body" hx-swap-oob="beforeend">(.*?)</div>', re.S)
EVENT = re.compile(r'<div id="progress" class="progress(?: event-([a-z-]+))?"[^>]*>(.*?)(?:<span|<button|</div>)', re.S)
ERROR = re.compile(r'<div id="chat-status" class="status error" role="alert">(.*?)(?:<form|</div>)', re.S)


@dataclass
class Frames:
    """What one socket has received, in order."""

    texts: list[str] = field(default_factory=list)

    def message_ids(self) -> list[int]:
        """Every stored message id the page was shown, in order of first appearance."""
        seen: dict[int, None] = {}
        for text in self.texts:
            for found in MSG_ID.findall(text):
                seen.setdefault(int(found), None)
        return list(seen)

    def last_history(self) -> list[int]:
        """The message ids of the newest full history the page was sent, in page order."""
        for text in reversed(self.texts):
            if 'id="history" hx-swap-oob="true"' in text:
                return [int(found) for found in MSG_ID.findall(text.split('id="history" hx-swap-oob="true"', 1)[1])]
        return []

    def events(self) -> list[tuple[str, str]]:
        """The live event and progress lines, ``(event type or "progress", text)``, in order."""
        out = []
        for text in self.texts:
            for kind, line in EVENT.findall(text):
                out.append((kind or "progress", html.unescape(" ".join(line.split()))))
        return out

    def errors(self) -> list[str]:
        return [html.unescape(" ".join(e.split())) for t in self.texts for e in ERROR.findall(t)]

    def reply(self, reply_id: str) -> str:
        return "".join(html.unescape(d) for t in self.texts for r, d in DELTA.findall(t) if r == reply_id)

    def turn_done(self, since: int) -> bool:
        """Whether a turn ended (done, error or stopped) in the frames from index ``since``."""
        # The last frame of a turn tells the page it may send again (#turn-state); the first frame of a
        # retry also re-sends the whole history, so that alone says nothing.
        return any('data-streaming="0"' in t or 'class="status error"' in t for t in self.texts[since:])


class WebSocket:
    """Just enough of a websocket client for the chat socket: text frames, ping, close."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = Frames()
        self.closed = asyncio.Event()
        self.arrived = asyncio.Event()
        self._pump = asyncio.create_task(self._read_all())

    @classmethod
    async def connect(cls, url: str, *, cookie: str, timeout: float = 10) -> WebSocket:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://{host}:{port}\r\n"
            f"Cookie: {cookie}\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            writer.close()
            raise ConnectionError(f"websocket handshake refused: {status.decode(errors='replace')}")
        return cls(reader, writer)

    async def _read_frame(self) -> tuple[int, bytes]:
        first, second = await self.reader.readexactly(2)
        opcode, length = first & 0x0F, second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        mask = await self.reader.readexactly(4) if second & 0x80 else b""
        data = await self.reader.readexactly(length)
        if mask:
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        return (opcode | (0x80 if first & 0x80 else 0)), data

    async def _read_all(self) -> None:
        buffered = b""
        try:
            while True:
                head, data = await self._read_frame()
                opcode, fin = head & 0x0F, bool(head & 0x80)
                if opcode == 0x8:
                    break
                if opcode == 0x9:
                    await self._send(0xA, data)
                    continue
                if opcode in (0x1, 0x0):
                    buffered += data
                    if fin:
                        self.frames.texts.append(buffered.decode())
                        buffered = b""
                        self.arrived.set()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            self.arrived.set()

    async def _send(self, opcode: int, data: bytes) -> None:
        mask = os.urandom(4)
        length = len(data)
        if length < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        self.writer.write(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        await self.writer.drain()

    async def send_json(self, text: str) -> None:
        await self._send(0x1, text.encode())

    async def wait_for(self, condition: Callable[[Frames], Any], *, timeout: float, what: str) -> Any:
        """Wait until ``condition(frames)`` is truthy; fail with ``what`` after ``timeout`` seconds."""
        timeout = scaled(timeout)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = condition(self.frames)
            if value:
                return value
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; {self._last()}")
            if self.closed.is_set():
                raise AssertionError(f"the socket closed while waiting for {what}; {self._last()}")
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), min(remaining, 1.0))

    def _last(self) -> str:
        shown = [t[:300] for t in self.frames.texts[-4:]]
        return f"{len(self.frames.texts)} frames, the last: {shown}"

    async def close(self) -> None:
        if not self.closed.is_set():
            with contextlib.suppress(ConnectionError, OSError):
                await self._send(0x8, struct.pack("!H", 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closed.wait(), 5)
        self._pump.cancel()
        self.writer.close()


# --- a TCP proxy that can be cut ---------------------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target; ``cut()`` resets every connection and refuses new
    ones (as a dead server would), ``resume()`` listens on the same port again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.connections = 0

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        # shutdown() before close(): it wakes the threads blocked in accept() and recv() on them.
        listener, self._listener = self._listener, None
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [s for s in [listener] if s is not None] + sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def resume(self) -> None:
        self.start()

    def stop(self) -> None:
        self.cut()


@contextlib.contextmanager
def redis_server(logdir: Path) -> Iterator[tuple[int, Callable[[], None]]]:
    """A private redis-server on a free port, without persistence; yields its port and a restart
    function (SIGKILL, then a fresh server on the same port: everything it held is gone)."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    env = dict(os.environ)
    holder: list[Proc] = []

    def start() -> None:
        proc = spawn(f"redis-{port}", argv, env, logdir)
        holder.append(proc)
        wait_until(lambda: port_open(port), timeout=20, what="redis-server to listen")

    def restart() -> None:
        holder[-1].kill()
        start()

    start()
    try:
        yield port, restart
    finally:
        holder[-1].stop()
