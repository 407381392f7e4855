"""Settings, all from environment variables (see docs/configuration.md and .env.example).

With nothing set the app runs on its embedded default: SQLite, the in-memory
channel layer and Celery tasks executed in-process. ``DATABASE_URL``,
``REDIS_URL`` and ``OLLAMA_HOST`` switch to real services.
"""

from __future__ import annotations

import json
import os
import tomllib
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from engine.core.backoff import DEFAULT_RETRY_SECONDS, Backoff

BASE_DIR = Path(__file__).resolve().parent.parent

# The release, read once from pyproject.toml (the project is not installed, so importlib.metadata does not know
# it): the page footer (ollm_site.context_processors) and /health (ollm_site.health) show it; CHANGELOG.md says
# what each release holds.
with (BASE_DIR / "pyproject.toml").open("rb") as _pyproject:
    OLLM_VERSION: str = tomllib.load(_pyproject)["project"]["version"]
load_dotenv(os.environ.get("OLLM_ENV_FILE", BASE_DIR / ".env"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DEBUG")
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is required when DEBUG is off: set it in the environment or in .env "
            "(`make run` writes a random one to .env on first start)."
        )
    SECRET_KEY = "insecure-debug-only-key"

ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# Pages at these origins (scheme://host[:port], "https://*.example.com" for subdomains) may open
# websockets besides the site's own origin, e.g. behind a reverse proxy that rewrites the Host.
# Unset: CSRF_TRUSTED_ORIGINS (ollm_site/origins.py).
OLLM_TRUSTED_ORIGINS = (
    [o.strip() for o in os.environ["OLLM_TRUSTED_ORIGINS"].split(",") if o.strip()]
    if "OLLM_TRUSTED_ORIGINS" in os.environ
    else CSRF_TRUSTED_ORIGINS
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "django_htmx",
    "ninja",
    "axes",
    "accounts",
    "chat",
    "contextmgr",
    "search",
]

MIDDLEWARE = [
    # First: /health answers before the host check and the https redirect (Docker probes it on 127.0.0.1).
    "ollm_site.health.HealthMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # The Content-Security-Policy of every page, and no-store on /api/ (see its docstring).
    "ollm_site.middleware.SecurityHeadersMiddleware",
    # After the authentication middleware: turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "ollm_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "ollm_site.context_processors.version",
            ],
        },
    },
]
WSGI_APPLICATION = "ollm_site.wsgi.application"
ASGI_APPLICATION = "ollm_site.asgi.application"

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Compressions and chat turns write from different threads: WAL lets them
    # read while one writes, IMMEDIATE transactions take the write lock up
    # front, and the timeout waits for it instead of failing "database is locked".
    # synchronous=NORMAL, as SQLite advises with WAL: a commit no longer waits for the disk (a turn
    # commits several times); a crash of the app loses nothing, a power cut may lose the last
    # commits but never corrupts the database (docs/production.md).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Brute-force protection on every login form (the app's and the admin's), by django-axes: after
# OLLM_LOGIN_FAILURE_LIMIT failed logins for one username from one client address, that username
# cannot log in from that address, even with the right password, for OLLM_LOGIN_LOCK_MINUTES; after
# OLLM_LOGIN_USERNAME_FAILURE_LIMIT failures for one username from any addresses, it cannot log in from
# anywhere. An address is never locked for accounts it has not failed against: behind a reverse proxy
# every user may share one (accounts.backends.LoginThrottle).
# Attempts stored in the database (table axes_accessattempt; the admin lists and deletes them).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Staff review every session in the admin (view only): accounts/backends.py.
    "accounts.backends.StaffReviewBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("OLLM_LOGIN_FAILURE_LIMIT", "5"))
OLLM_LOGIN_USERNAME_FAILURE_LIMIT = int(os.environ.get("OLLM_LOGIN_USERNAME_FAILURE_LIMIT", "20"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("OLLM_LOGIN_LOCK_MINUTES", "15")))
# The counts, in this order (LoginThrottle gives each its limit): a username from one address, to
# AXES_FAILURE_LIMIT; a username from any address, to OLLM_LOGIN_USERNAME_FAILURE_LIMIT.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
AXES_HANDLER = "accounts.backends.LoginThrottle"
# Attempts during a lock do not prolong it: it ends OLLM_LOGIN_LOCK_MINUTES after the last counted failure.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
# No admin pages for the attempts: `manage.py axes_reset_username <name>` (or `axes_reset`) lifts a lock.
AXES_ENABLE_ADMIN = False
AXES_LOCKOUT_CALLABLE = "accounts.views.login_locked_out"
AXES_CLIENT_IP_CALLABLE = "accounts.views.login_client_address"
# A locked-out login answers 429 with the login page and "try again in N minutes".
AXES_HTTP_RESPONSE_CODE = 429
# Replaces the whole Content-Security-Policy of ollm_site.middleware (``{ws}``: the site's ws:// and wss://).
OLLM_CONTENT_SECURITY_POLICY = os.environ.get("OLLM_CONTENT_SECURITY_POLICY", "")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat:session_list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
STATICFILES_DIRS = [BASE_DIR / "static"]

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    # channels_redis waits for a socket's next message with a 5-second BZPOPMIN; redis-py 8 reads
    # with a 5-second socket timeout by default, so every idle socket failed "Timeout reading from"
    # after 5 s and its consumer died. The read must outlast the blocking pop.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30, "socket_connect_timeout": 5}]},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER")
    # What the cache counts (imports per user and minute) is then shared by every web process.
    # Clearing a Redis cache empties its whole database: OLLM_CACHE_URL can give it one apart.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ.get("OLLM_CACHE_URL") or REDIS_URL,
            "KEY_PREFIX": "ollm",
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    # No broker: tasks run in-process, and their errors reach the caller.
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True

OLLAMA_HOST = os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434")
# Several Ollama servers (a comma-separated list) share the load; OLLAMA_HOST is used when it is unset.
OLLAMA_HOSTS = [h.strip() for h in os.environ.get("OLLAMA_HOSTS", "").split(",") if h.strip()] or [OLLAMA_HOST]
# Generations one host runs at once from this process (Ollama's OLLAMA_NUM_PARALLEL, say); more wait in its queue.
OLLM_HOST_SLOTS = int(os.environ.get("OLLM_HOST_SLOTS", "1"))
# Chat turns the bundled model server generates at once (its --slots, read from the same variable): the app
# sends it as many.
OLLM_MODEL_SLOTS = int(os.environ.get("OLLM_MODEL_SLOTS", "5"))
# The longest a summary, aging or merge waits behind chat turns for a host before it runs beside them.
OLLM_BACKGROUND_MAX_WAIT_SECONDS = float(os.environ.get("OLLM_BACKGROUND_MAX_WAIT_SECONDS", "15"))
# A host that failed or timed out is left alone this long before it is tried again.
OLLM_HOST_RETRY_SECONDS = float(os.environ.get("OLLM_HOST_RETRY_SECONDS", "30"))
OLLM_LLM_BACKEND = os.environ.get("OLLM_LLM_BACKEND", "auto")
OLLAMA_TIMEOUT = float(os.environ.get("OLLAMA_TIMEOUT", "120"))
# The most tokens a chat reply may have (less when the context has less room left).
OLLM_REPLY_MAX_TOKENS = int(os.environ.get("OLLM_REPLY_MAX_TOKENS", "512"))
# The most tokens the answer to a client's background task (a title, tags, follow-ups) may have: well-formed
# ones are far shorter, and a small model that loops would hold the model for every chat behind it.
OLLM_CLIENT_TASK_MAX_TOKENS = int(os.environ.get("OLLM_CLIENT_TASK_MAX_TOKENS", "256"))
if os.environ.get("OLLM_CHAT_TEMPERATURE", "").strip():
    # Refused rather than ignored: a deployment that set it would otherwise sample differently unawares.
    raise ImproperlyConfigured(
        "OLLM_CHAT_TEMPERATURE is gone: replies are sampled as each session's settings say, over "
        'OLLM_CONTEXT_DEFAULTS (e.g. {"sampling": {"temperature": 0.7}}); what neither sets is the model '
        "server's default (Ollama's)."
    )
# Summaries and aging run on this model when set (a session's own choice wins); empty: the chat model.
OLLM_SUMMARY_MODEL = os.environ.get("OLLM_SUMMARY_MODEL", "").strip()
# A compression renews its lease on the session every quarter of this; one not renewed for this
# long died with its worker, and the session can be compressed again.
OLLM_COMPRESSION_LEASE_SECONDS = float(os.environ.get("OLLM_COMPRESSION_LEASE_SECONDS", "60"))
# How long the API's ``wait_compression`` and the terminal chat wait for a compression to end.
OLLM_COMPRESSION_WAIT_SECONDS = float(os.environ.get("OLLM_COMPRESSION_WAIT_SECONDS", "600"))
# How long a turn that needs room waits for a running compression before it compresses
# extractively itself (no model), taking the session over: the person is waiting for the reply.
OLLM_COMPRESSION_TURN_WAIT_SECONDS = float(os.environ.get("OLLM_COMPRESSION_TURN_WAIT_SECONDS", "30"))
# A background compression the model failed (timed out, unreachable, refused) is tried again
# after each of these waits in turn, in seconds; blank: never by itself.
OLLM_COMPRESSION_RETRY_SECONDS = os.environ.get("OLLM_COMPRESSION_RETRY_SECONDS", DEFAULT_RETRY_SECONDS)
try:
    Backoff.parse(OLLM_COMPRESSION_RETRY_SECONDS)
except ValueError as exc:
    raise ImproperlyConfigured(f"OLLM_COMPRESSION_RETRY_SECONDS: {exc}") from None
# Session files a user may import in a minute (counted in the cache: per process unless it is shared).
OLLM_IMPORTS_PER_MINUTE = int(os.environ.get("OLLM_IMPORTS_PER_MINUTE", "10"))
# The bundled model server (python -m modelserver), which `make run` starts; its own settings
# (OLLM_EMBEDDED_N_CTX, OLLM_MODEL_THREADS) are read by that process.
OLLM_MODEL_SERVER_URL = os.environ.get("OLLM_MODEL_SERVER_URL", "http://127.0.0.1:11435")
# Per-model Ollama sizes that replace the tier table's, e.g. {"llama3.2:1b": {"16384": 12000}}.
OLLM_MODEL_CONTEXT_OVERRIDES: dict[str, dict[int, int]] = {
    model: {int(size): int(tokens) for size, tokens in sizes.items()}
    for model, sizes in json.loads(os.environ.get("OLLM_MODEL_CONTEXT_OVERRIDES", "{}")).items()
}
# Global defaults of the session settings, as JSON: {"compression": {...}, "snapshots": {...}, "sampling": {...}}.
OLLM_CONTEXT_DEFAULTS = json.loads(os.environ.get("OLLM_CONTEXT_DEFAULTS", "{}"))

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = False
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

# Served over HTTPS (OLLM_HTTPS=1, production): redirect http to https, send HSTS, and
# send the session and CSRF cookies over HTTPS only. Off by default, so that `make run`
# keeps working on http://127.0.0.1. `manage.py check --deploy` is clean with these on.
OLLM_HTTPS = env_bool("OLLM_HTTPS")
if OLLM_HTTPS:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    # Opt-in: the preload list is a commitment made by submitting the domain (hstspreload.org).
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD")
# Behind a reverse proxy that terminates TLS: trust its X-Forwarded-Proto. Only set this when
# the proxy always sets (or strips) that header, or any client could claim to be on https.
if env_bool("OLLM_BEHIND_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Off (empty) by default. The Ollama and OpenAI endpoints' requests without a token whose peer address
# (REMOTE_ADDR, never X-Forwarded-For) is this machine's act as this user: for clients that cannot send
# one. Behind a proxy every request's peer is the proxy, often this machine: the two do not go together.
OLLM_LOOPBACK_USER = os.environ.get("OLLM_LOOPBACK_USER", "").strip()
if OLLM_LOOPBACK_USER and env_bool("OLLM_BEHIND_PROXY"):
    raise ImproperlyConfigured(
        "OLLM_LOOPBACK_USER cannot be set with OLLM_BEHIND_PROXY: behind a proxy every request comes from the "
        "proxy's address, so every request without a token would act as that user."
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
