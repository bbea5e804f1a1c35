"""Container health check: GET ``$AGL_HEALTH_URL`` and exit 0 on a 2xx answer, 1 otherwise.

Only the standard library, so it runs in every image variant without the venv. Roles without an
HTTP endpoint (runners, one-shot jobs) leave ``AGL_HEALTH_URL`` unset: their health is the process
itself, which Docker already watches, so the check passes instead of guessing.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    url = os.environ.get("AGL_HEALTH_URL", "").strip()
    if not url:
        return 0
    try:
        with urllib.request.urlopen(url, timeout=float(os.environ.get("AGL_HEALTH_TIMEOUT", "2"))) as response:
            ok = 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print(f"unhealthy: {url} answered {response.status}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
