"""Session files, the front door: what the rest of the app may call. Its insides are ``export`` (a
session as a file, or many as a zip), ``imports`` (a session file read back as a new session),
``archive_export`` and ``archive`` (the whole session, and its import); no module outside the package
imports them (pyproject.toml's import contracts)."""

from chat.services.files.archive import session_archive, session_archive_import
from chat.services.files.export import session_file, session_file_build, sessions_zip, sessions_zip_response
from chat.services.files.imports import ImportConflict, import_throttle, session_file_import, session_file_load

__all__ = [
    "ImportConflict",
    "import_throttle",
    "session_archive",
    "session_archive_import",
    "session_file",
    "session_file_build",
    "session_file_import",
    "session_file_load",
    "sessions_zip",
    "sessions_zip_response",
]
