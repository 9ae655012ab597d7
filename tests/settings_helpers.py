"""Running the project's commands as a server starts them: a process of its own, with only the
environment a test gives it (and the embedded default's folder in ``var_dir``)."""

import subprocess
import sys
from pathlib import Path

from django.conf import settings


def clean_environment(var_dir: Path, **variables: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "agentsite.settings",
        "VAR_DIR": str(var_dir),
        **variables,
    }


def manage_py_check(var_dir: Path, **variables: str) -> subprocess.CompletedProcess:
    """``manage.py check`` with ``variables`` as the environment's; its exit code and output."""
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env=clean_environment(var_dir, **variables),
        capture_output=True,
        text=True,
        timeout=120,
    )
