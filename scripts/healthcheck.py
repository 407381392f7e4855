"""Exit 0 when the app on 127.0.0.1:$PORT answers /health with 200, else 1: the Docker HEALTHCHECK.

Standard library only, so it runs in the image without Django being imported.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status: int = response.status
    except (urllib.error.URLError, OSError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
