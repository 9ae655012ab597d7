"""The embedded default as `make run` starts it: the Procfile's web server, worker and beat under
honcho, on SQLite and the file-system broker, with nothing but a folder of its own. A person logs
in, submits a task through the form and reads its run: everything over real HTTP."""

import http.cookiejar
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
from django.conf import settings

from ..net import free_port

pytestmark = pytest.mark.integration


def _manage(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=env, check=True,
                   capture_output=True)  # fmt: skip


class Browser:
    """Just enough of a browser: cookies, redirects, the form's CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[str, str]:
        with self.opener.open(self.base + path, timeout=10) as response:
            return response.geturl(), response.read().decode()

    def submit(self, path: str, fields: dict[str, str]) -> tuple[str, str]:
        _, page = self.get(path)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
        data = urllib.parse.urlencode({"csrfmiddlewaretoken": token, **fields}).encode()
        request = urllib.request.Request(self.base + path, data=data, headers={"Referer": self.base + path})
        with self.opener.open(request, timeout=10) as response:
            return response.geturl(), response.read().decode()


def test_make_run_s_stack_runs_a_submitted_task_end_to_end(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
    env.update(VAR_DIR=str(tmp_path), WEB_PORT=str(port), WORKSPACES_ROOT="", RUN_SANDBOXES_ROOT="")
    env = {k: v for k, v in env.items() if v}
    _manage(env, "migrate", "--noinput")
    _manage(env, "seed_demo")
    log = (tmp_path / "honcho.log").open("wb")
    stack = subprocess.Popen(
        [sys.executable, "-m", "honcho", "start"], cwd=settings.BASE_DIR, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        browser = Browser(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while True:
            try:
                browser.get("/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline and stack.poll() is None, (tmp_path / "honcho.log").read_text()
                time.sleep(0.3)
        url, page = browser.submit("/accounts/login/", {"username": "staff", "password": "staff-demo"})
        assert not url.endswith("/accounts/login/"), "the demo login failed"
        # A first start shows the product: the seeded history is staff's own runs.
        _, page = browser.get("/runs/")
        assert "Summarise release-notes.txt" in page and "Not accomplished" in page
        url, page = browser.submit(
            "/tasks/new/", {"kind": "arithmetic", "text": "What is (17 * 23 + 4) / 5?", "expected_answer": "79"}
        )
        run_id = int(re.search(r"/runs/(\d+)/$", url)[1])
        assert "is queued" in page
        database = sqlite3.connect(tmp_path / "db.sqlite3")
        deadline = time.monotonic() + 90
        while True:
            row = database.execute(
                "SELECT status, final_output, score FROM feedback_run WHERE id = ?", [run_id]
            ).fetchone()
            if row[2] is not None:
                break
            assert time.monotonic() < deadline, (row, (tmp_path / "honcho.log").read_text()[-4000:])
            time.sleep(0.3)
        status, output, score = row
        assert status == "succeeded" and output.endswith("= 79") and score > 0.8
        _, page = browser.get(f"/runs/{run_id}/")
        assert "(17 * 23 + 4) / 5 = 79" in page and "Offline demo model" in page
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        try:
            stack.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait()
