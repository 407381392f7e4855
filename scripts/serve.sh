#!/bin/sh
# Start ollm-site: the one start-up sequence of `make run` and of the Docker image's CMD.
#
#   HOST, PORT      where daphne listens (default 127.0.0.1:8000)
#   PYTHON          the interpreter (default: python on PATH); daphne is taken from its directory
#   OLLM_STATIC_PREBUILT=1   skip collectstatic (the image collects its static files at build time)
#   OLLM_START_MODEL_SERVER=0  do not start the bundled model server here (docker-compose runs it
#                   as a service of its own; OLLM_MODEL_SERVER_URL says where it is)
set -eu
cd "$(dirname "$0")/.."
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
PYTHON="${PYTHON:-python}"
BIN="$(dirname "$(command -v "$PYTHON")")"

"$PYTHON" manage.py migrate --noinput
if [ "${OLLM_STATIC_PREBUILT:-0}" != "1" ]; then
    "$PYTHON" manage.py collectstatic --noinput --verbosity 0
fi
"$PYTHON" manage.py first_run --url "http://$HOST:$PORT/"

# The bundled model in a process of its own, restarted by its supervisor if it dies: a crash
# of the native library costs one reply, never this web server.
model_server=""
if [ "${OLLM_START_MODEL_SERVER:-1}" = "1" ] && [ "${OLLM_LLM_BACKEND:-auto}" != "ollama" ]; then
    # llama.cpp (the xllamacpp wheel) links the system's OpenMP runtime: say so plainly when it is missing,
    # rather than let the model server die on an ImportError at every restart.
    if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libgomp\.so\.1'; then
        echo "The bundled model needs the OpenMP runtime (libgomp.so.1), which this system lacks." >&2
        echo "Install it (Debian/Ubuntu: sudo apt-get install libgomp1; Fedora: sudo dnf install libgomp)," >&2
        echo "or use Ollama instead: OLLM_LLM_BACKEND=ollama make run" >&2
        exit 1
    fi
    url="${OLLM_MODEL_SERVER_URL:-http://127.0.0.1:11435}"
    port="${url##*:}"
    port="${port%%/*}"
    "$PYTHON" -m modelserver --supervise --port "$port" &
    model_server=$!
fi
stop() {
    [ -n "$model_server" ] && kill "$model_server" 2>/dev/null
    [ -n "${web:-}" ] && kill "$web" 2>/dev/null
    wait
}
trap 'stop; exit 0' INT TERM
"$BIN/daphne" -b "$HOST" -p "$PORT" ollm_site.asgi:application &
web=$!
status=0
wait "$web" || status=$?
web=""
stop
exit "$status"
