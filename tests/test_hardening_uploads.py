"""Uploads are refused before they are read, and what is read is bounded, in memory only.

Against a live server, a request declares a body of 200 MB and sends its first 64 KiB only, then
waits for the answer: the server cannot have read (nor spooled) more than those 64 KiB, and a
server that reads the body before refusing it never answers (the wait ends in a failure)."""

import http.client
import json
import socket
from io import BytesIO
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import RequestDataTooBig
from django.http.multipartparser import MultiPartParser
from django.test import Client
from django.urls import reverse

from feedback.forms import UPLOAD_MAX_BYTES, UPLOAD_MAX_FILES
from feedback.models import Run, Workspace
from feedback.uploads import BoundedMemoryUploadHandler, UploadLimits

from .api_helpers import API, call, token_for

SUBMIT = reverse("feedback-task-submit")
LOGIN = reverse("login")
DECLARED = 200 * 1024 * 1024
SENT = 64 * 1024
# Only how long a failing test waits for an answer that a server reading the body never gives.
WAIT_SECONDS = 30
BOUNDARY = "----hardening-uploads"


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    if filename:
        head += "Content-Type: text/plain\r\n"
    return head.encode() + b"\r\n" + value + b"\r\n"


def _multipart(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


# The start of a form with one huge file, the rest never sent.
PREFIX = (
    _part("kind", b"file_analysis")
    + _part("text", b"Summarise the file")
    + _part("files", b"a" * SENT, filename="big.txt")[: -len(b"\r\n")]
)[: SENT + 500]


def _answer(live_server, path: str, headers: dict[str, str], first_bytes: bytes) -> tuple[int, dict, bytes]:
    """Send ``headers`` and the first bytes of the body, then read the answer, the body unsent."""
    url = urlsplit(live_server.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=WAIT_SECONDS)
    try:
        head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
        sock.sendall(head.encode() + first_bytes)
        response = http.client.HTTPResponse(sock, method="POST")
        try:
            response.begin()
        except TimeoutError:
            pytest.fail(f"No answer after {len(first_bytes)} bytes of the body: the server waits to read the rest")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        sock.close()


def _csrf_cookie(live_server) -> str:
    """What a signed-out visitor has: the CSRF cookie of the login page."""
    url = urlsplit(live_server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=WAIT_SECONDS)
    connection.request("GET", LOGIN)
    response = connection.getresponse()
    response.read()
    connection.close()
    cookie = response.getheader("Set-Cookie")
    assert cookie and cookie.startswith("csrftoken=")
    return cookie.split(";")[0].removeprefix("csrftoken=")


def _signed_in(user) -> tuple[str, str]:
    """The cookies of ``user``'s browser: session and CSRF token."""
    client = Client()
    client.force_login(user)
    client.get(SUBMIT)
    return client.cookies["sessionid"].value, client.cookies["csrftoken"].value


def _multipart_headers(cookie: str, token: str, length: int = DECLARED, **more: str) -> dict[str, str]:
    return {
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        "Content-Length": str(length),
        "Cookie": cookie,
        "X-CSRFToken": token,
        **more,
    }


# --- refused unread, by authentication and by length ------------------------------------------
def test_a_signed_out_upload_is_sent_to_the_login_page_unread(live_server):
    token = _csrf_cookie(live_server)
    status, headers, _ = _answer(live_server, SUBMIT, _multipart_headers(f"csrftoken={token}", token), PREFIX)
    assert status == 302 and headers["location"] == f"{LOGIN}?next={SUBMIT}"
    assert not Run.objects.exists()


def test_a_signed_out_htmx_upload_is_sent_to_the_login_page_unread(live_server):
    token = _csrf_cookie(live_server)
    htmx = {"HX-Request": "true", "HX-Current-URL": f"{live_server.url}{SUBMIT}"}
    status, headers, _ = _answer(live_server, SUBMIT, _multipart_headers(f"csrftoken={token}", token, **htmx), PREFIX)
    assert status == 200 and headers["hx-redirect"] == f"{LOGIN}?next={SUBMIT}"


def test_a_staff_upload_larger_than_the_form_takes_is_refused_unread(live_server, staff):
    session, token = _signed_in(staff)
    cookie = f"sessionid={session}; csrftoken={token}"
    status, headers, body = _answer(live_server, SUBMIT, _multipart_headers(cookie, token), PREFIX)
    html = body.decode()
    assert status == 413 and headers["content-type"].startswith("text/html")
    assert '<header class="topbar">' in html and "Too large" in html
    # 10 files of 1 MB plus 2.5 MB of fields: what the form can ever need.
    assert "The request body is too large (200.0 MB; this address takes at most 12.5 MB)" in html
    assert "Up to 10 files of 1.0 MB each." in html
    assert not Run.objects.exists() and not Workspace.objects.exists()


def test_a_staff_htmx_upload_larger_than_the_form_takes_is_a_short_text(live_server, staff):
    session, token = _signed_in(staff)
    headers = _multipart_headers(f"sessionid={session}; csrftoken={token}", token, **{"HX-Request": "true"})
    status, answer_headers, body = _answer(live_server, SUBMIT, headers, PREFIX)
    assert status == 413 and answer_headers["content-type"].startswith("text/plain")
    assert body.decode().startswith("The request body is too large (200.0 MB;")


def test_a_body_larger_than_a_form_without_files_takes_is_refused_unread(live_server, staff):
    # The login form takes no files: DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) is all it can need.
    token = _csrf_cookie(live_server)
    status, _, body = _answer(live_server, LOGIN, _multipart_headers(f"csrftoken={token}", token), PREFIX)
    html = body.decode()
    assert status == 413 and "(200.0 MB; this address takes at most 2.5 MB)" in html and "files of" not in html


def test_an_api_body_larger_than_the_api_takes_is_refused_unread_in_json(live_server, staff):
    headers = {
        "Authorization": f"Bearer {token_for(staff)}",
        "Content-Type": "application/json",
        "Content-Length": str(DECLARED),
    }
    status, answer_headers, body = _answer(live_server, f"{API}/tasks", headers, b'{"text": "' + b"a" * SENT)
    assert status == 413 and answer_headers["content-type"] == "application/json; charset=utf-8"
    assert json.loads(body)["detail"].startswith("The request body is too large (200.0 MB; this address takes at most")
    assert not Run.objects.exists()


def test_a_chunked_upload_is_refused_unread(live_server, staff):
    # No Content-Length: Django under WSGI reads such a body as empty, and the form would say
    # nothing was sent. It is refused, unread, whatever its size.
    session, token = _signed_in(staff)
    headers = _multipart_headers(f"sessionid={session}; csrftoken={token}", token)
    del headers["Content-Length"]
    headers["Transfer-Encoding"] = "chunked"
    chunk = f"{len(PREFIX):x}\r\n".encode() + PREFIX + b"\r\n"
    status, _, body = _answer(live_server, SUBMIT, headers, chunk * 4)
    html = body.decode()
    assert status == 411 and "Length required" in html
    assert "without its length (Content-Length)" in html and "nothing of it was used" in html
    assert not Run.objects.exists()


def _submit(client, *files: tuple[str, bytes]):
    """The task form posted with ``files`` (name, content), the names sent as they are."""
    parts = (_part("files", content, filename=name) for name, content in files)
    body = _multipart(_part("kind", b"file_analysis"), _part("text", b"Summarise the files"), *parts)
    return client.post(SUBMIT, data=body, content_type=f"multipart/form-data; boundary={BOUNDARY}")


# --- what is read is bounded, and never written to disk ---------------------------------------
@pytest.fixture
def no_temp_folder(settings, tmp_path):
    """An upload temp folder that does not exist: anything spooled to disk fails there."""
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "no-such-folder")


def test_a_file_over_1_mb_is_refused_by_the_form_without_touching_the_disk(client, staff, no_temp_folder):
    client.force_login(staff)
    response = _submit(client, ("big.txt", b"a" * (5 * UPLOAD_MAX_BYTES)))
    assert response.status_code == 400
    assert "big.txt is larger than 1 MB." in response.content.decode()
    assert not Run.objects.exists() and not Workspace.objects.exists()


def test_more_than_10_files_are_refused_by_the_form_without_touching_the_disk(client, staff, no_temp_folder):
    client.force_login(staff)
    response = _submit(client, *((f"f{i}.txt", b"a" * UPLOAD_MAX_BYTES) for i in range(UPLOAD_MAX_FILES + 1)))
    assert response.status_code == 400 and "At most 10 files at a time." in response.content.decode()
    assert not Run.objects.exists()


def test_ten_files_of_1_mb_are_accepted_without_touching_the_disk(client, staff, no_temp_folder):
    client.force_login(staff)
    response = _submit(client, *((f"f{i}.txt", b"x" * UPLOAD_MAX_BYTES) for i in range(UPLOAD_MAX_FILES)))
    assert response.status_code == 302
    workspace = Run.objects.get().task.workspace
    assert sorted(p.name for p in workspace.path.iterdir()) == sorted(f"f{i}.txt" for i in range(UPLOAD_MAX_FILES))
    assert all(p.stat().st_size == UPLOAD_MAX_BYTES for p in workspace.path.iterdir())


def _parse(body: bytes, *, declared: int, limits: UploadLimits):
    """The upload handler at work on ``body`` (a stream that ends where it ends, as an ASGI server
    gives it, whatever ``declared`` says), for a view that takes ``limits``."""
    request = type("Request", (), {"upload_limits": limits})()
    meta = {"CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}", "CONTENT_LENGTH": str(declared)}
    return MultiPartParser(meta, BytesIO(body), [BoundedMemoryUploadHandler(request)]).parse()


def test_the_handler_keeps_no_more_of_a_file_than_its_limit():
    body = _multipart(
        _part("files", b"a" * (3 * UPLOAD_MAX_BYTES), filename="big.txt"),
        _part("files", b"small", filename="small.txt"),
    )
    _, files = _parse(body, declared=len(body), limits=UploadLimits(files=2, file_bytes=UPLOAD_MAX_BYTES))
    big, small = files.getlist("files")
    assert big.size == 3 * UPLOAD_MAX_BYTES  # what was sent, for the form to refuse ...
    assert len(big.read()) == UPLOAD_MAX_BYTES  # ... of which no more than the limit is kept
    assert small.size == 5 and small.read() == b"small"


def test_the_handler_keeps_no_file_past_the_number_the_view_takes():
    body = _multipart(*(_part("files", b"abc", filename=f"f{i}.txt") for i in range(3)))
    _, files = _parse(body, declared=len(body), limits=UploadLimits(files=2, file_bytes=UPLOAD_MAX_BYTES))
    kept = [f.read() for f in files.getlist("files")]
    assert kept == [b"abc", b"abc", b""]  # the third is counted (the form refuses the number), not kept


def test_the_handler_keeps_no_file_for_a_view_that_takes_none():
    body = _multipart(_part("name", b"value"), _part("files", b"abc", filename="f.txt"))
    post, files = _parse(body, declared=len(body), limits=UploadLimits())
    assert post["name"] == "value" and not files


def test_the_handler_stops_a_body_that_runs_past_its_declared_length_and_the_view_s_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    limits = UploadLimits(files=1, file_bytes=1000)
    body = _multipart(_part("files", b"a" * 50_000, filename="f.txt"))
    with pytest.raises(RequestDataTooBig):
        _parse(body, declared=100, limits=limits)
    # The same body, declared as it is, is refused before a byte is parsed.
    with pytest.raises(RequestDataTooBig):
        _parse(body, declared=len(body), limits=limits)


# --- one name, one file ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("names", "message"),
    [
        (("b.txt", "b.txt"), "b.txt is uploaded twice: each file needs its own name."),
        # Django drops the folders: this one is b.txt too, and would replace the first.
        (("b.txt", "a/../b.txt"), "b.txt is uploaded twice: each file needs its own name."),
        (("Notes.txt", "notes.txt"), "notes.txt and Notes.txt would be one file in the workspace"),
    ],
)
def test_two_uploads_of_one_name_are_refused_naming_the_file(client, staff, names, message):
    client.force_login(staff)
    response = _submit(client, (names[0], b"first"), (names[1], b"second"))
    assert response.status_code == 400 and message in response.content.decode()
    assert not Run.objects.exists() and not Workspace.objects.exists()


def test_two_api_files_of_one_name_are_refused_naming_the_file(client, staff):
    body = {
        "kind": "file_analysis",
        "text": "Summarise both files",
        "files": [{"name": "b.txt", "content": "first"}, {"name": "b.txt", "content": "second"}],
    }
    response = call(client, "POST", "/tasks", token=token_for(staff), body=body)
    assert response.status_code == 400
    assert response.json()["errors"] == {"files": ["b.txt is uploaded twice: each file needs its own name."]}
    assert not Run.objects.exists() and not Workspace.objects.exists()
