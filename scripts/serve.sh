#!/bin/sh
# Start ollm-site: the one start-up sequence of `make run` and of the Docker image's CMD.
#
#   HOST, PORT      where daphne listens (default 127.0.0.1:8000)
#   PYTHON          the interpreter (default: python on PATH); daphne is taken from its directory
#   OLLM_STATIC_PREBUILT=1   skip collectstatic (the image collects its static files at build time)
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
exec "$BIN/daphne" -b "$HOST" -p "$PORT" ollm_site.asgi:application
