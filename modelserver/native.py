"""What the engine needs around xllamacpp's server: the GGUF header's metadata, Python's signal
handlers kept, and a streamed completion run beside the generation that reads it."""

from __future__ import annotations

import queue
import secrets
import signal
import struct
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, BinaryIO


class NativeError(Exception):
    """The native server failed; the engine names it to the user."""


def gguf_metadata(path: Path, *, string_arrays: Collection[str] = ()) -> dict[str, Any]:
    """The keys of a GGUF file's header (``general.architecture``, ``llama.context_length``…): scalars as
    text, and the string arrays named in ``string_arrays`` (``tokenizer.ggml.merges``) as lists; the other
    arrays (the vocabulary's tokens and scores) are skipped."""
    scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def read(stream: BinaryIO, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, stream.read(size))[0]

    def text(stream: BinaryIO) -> str:
        return stream.read(read(stream, "<Q")).decode("utf-8", errors="replace")

    def value(stream: BinaryIO, kind: int, keep: bool) -> Any:
        if kind == 8:
            return text(stream)
        if kind == 9:
            item_kind, count = read(stream, "<I"), read(stream, "<Q")
            if keep and item_kind == 8:
                return [text(stream) for _ in range(count)]
            if item_kind in scalars:
                stream.seek(count * struct.calcsize(scalars[item_kind]), 1)
            else:
                for _ in range(count):
                    value(stream, item_kind, False)
            return None
        return read(stream, scalars[kind])

    found: dict[str, Any] = {}
    with path.open("rb") as stream:
        if stream.read(4) != b"GGUF":
            raise NativeError(f"{path} is not a GGUF file")
        read(stream, "<I")  # version
        read(stream, "<Q")  # tensors
        for _ in range(read(stream, "<Q")):
            key = text(stream)
            got = value(stream, read(stream, "<I"), key in string_arrays)
            if isinstance(got, list):
                found[key] = got
            elif got is not None:
                found[key] = str(got).lower() if isinstance(got, bool) else str(got)
    return found


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def python_signal_handlers() -> dict[int, Any]:
    return {signum: signal.getsignal(signum) for signum in _SIGNALS}


def restore_signal_handlers(handlers: dict[int, Any]) -> None:
    """Python's handlers back, over those llama.cpp's server installs (which would stop its loop, not
    the process); only the main thread may set them, and only it needs to."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


class Segment:
    """One streamed completion on the server, run in a thread of its own: its chunks reach the
    generation through a queue. With ``handoff`` the server's stream waits until the generation has
    taken each chunk, so that a pause decided at the next chunk holds back everything after it."""

    _END = object()

    def __init__(
        self, run: Callable[[Callable[[Any], bool]], Any], *, stop_if: Callable[[], bool], handoff: bool
    ) -> None:
        self._chunks: queue.Queue[Any] = queue.Queue()
        self._taken = threading.Semaphore(0)
        self._handoff = handoff
        self._stop_if = stop_if
        self.stopped = False  # by ``stop_if``, not by the end of the reply
        self._closing = False
        self._thread = threading.Thread(target=self._run, args=(run,), daemon=True)
        self._thread.start()

    def _run(self, run: Callable[[Callable[[Any], bool]], Any]) -> None:
        try:
            run(self._on_chunk)
        except Exception as exc:  # handed to the generation, which raises it
            self._chunks.put(exc)
        finally:
            self._chunks.put(self._END)

    def _on_chunk(self, chunk: Any) -> bool:
        """Called by the server for each chunk; True stops (and cancels) the completion."""
        if self._closing:
            return True
        if self._stop_if():
            self.stopped = True
            return True
        self._chunks.put(chunk)
        if self._handoff:
            self._taken.acquire()
        return self._closing

    def __iter__(self) -> Iterator[Any]:
        while True:
            chunk = self._chunks.get()
            if chunk is self._END:
                return
            if isinstance(chunk, Exception):
                raise NativeError(f"the model failed: {chunk}") from chunk
            yield chunk
            if self._handoff:
                self._taken.release()

    def close(self) -> None:
        self._closing = True
        self._taken.release()
        self._thread.join()


def start_server(
    path: Path,
    *,
    n_ctx: int,
    n_threads: int | None,
    slots: int,
    seed: int,
    chat_template: str | None = None,
    http_threads: int = 8,
) -> tuple[Any, str]:
    """llama.cpp's server (xllamacpp) on the GGUF file at ``path``, with ``slots`` slots of ``n_ctx``
    tokens each, and the key its HTTP endpoints want."""
    import xllamacpp  # imported here: loading the native library needs a CPU it supports

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_parallel = slots
    params.n_ctx = n_ctx * slots  # the server divides its context among its slots
    params.kv_unified = False
    if n_threads:
        params.cpuparams.n_threads = n_threads
        params.cpuparams_batch.n_threads = n_threads
    params.sampling.seed = seed
    if chat_template is not None:
        params.chat_template = chat_template
    # Each slot reuses the prefix it last evaluated (``cache_prompt``). No prompt-state cache in RAM
    # besides: its saves delayed every reply's end and its memory was not bounded by what it saved.
    params.cache_ram_mib = 0
    params.ctx_shift = False
    params.ui = False
    params.verbosity = -1
    # The server also listens over HTTP (its tokenizer and template are reached only there): on the
    # loopback, on a free port, and only for who knows this process's key.
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_threads_http = http_threads
    key = secrets.token_urlsafe(32)
    params.api_keys = [key]
    handlers = python_signal_handlers()
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:
        raise NativeError(str(exc)) from exc
    finally:
        restore_signal_handlers(handlers)  # llama.cpp's server sets its own for SIGINT and SIGTERM
    return server, key
