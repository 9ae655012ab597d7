import os

import pytest

from feedback.agent.sandbox import SandboxError, resolve

HOSTILE_PATHS = [
    "..",
    "../",
    "../secret.txt",
    "../../etc/passwd",
    "inbox/../../etc/passwd",
    "inbox/../..",
    "./../x",
    "/etc/passwd",
    "/",
    "//etc/passwd",
    "~/.ssh/id_rsa",
    "~root",
    "%2e%2e/etc/passwd",
    "%2E%2E%2Fetc%2Fpasswd",
    "%252e%252e/etc/passwd",
    "..%2fetc%2fpasswd",
    "..\\..\\etc\\passwd",
    "inbox\\..\\..\\secret",
    "C:\\Windows\\system32",
    "c:/windows",
    "\uff0e\uff0e/etc/passwd",  # full-width dots normalise to ".."
    "inbox/\x00../../etc/passwd",
    "link-out/passwd",
    "link-out",
    "link-up/../secret.txt",
    "%2Fetc%2Fpasswd",
]


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "inbox").mkdir(parents=True)
    (ws / "inbox" / "a.txt").write_text("a")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink("/etc", ws / "link-out")
    os.symlink(tmp_path, ws / "link-up")
    os.symlink("inbox/a.txt", ws / "link-in.txt")
    return ws


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_it_refuses_paths_that_escape(workspace, path):
    with pytest.raises(SandboxError):
        resolve(workspace, path)


def test_it_lists_at_least_twenty_hostile_paths():
    assert len(set(HOSTILE_PATHS)) >= 20


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".", ""),
        ("inbox", "inbox"),
        ("inbox/a.txt", "inbox/a.txt"),
        ("./inbox/./a.txt", "inbox/a.txt"),
        ("inbox/new.txt", "inbox/new.txt"),
        ("link-in.txt", "inbox/a.txt"),
        ("  inbox/a.txt  ", "inbox/a.txt"),
    ],
)
def test_it_resolves_paths_inside(workspace, path, expected):
    assert resolve(workspace, path) == (workspace / expected).resolve()


def test_it_refuses_non_strings(workspace):
    with pytest.raises(SandboxError, match="string"):
        resolve(workspace, ["inbox"])  # type: ignore[arg-type]


def test_error_message_names_the_path(workspace):
    with pytest.raises(SandboxError, match=r"\.\./secret\.txt"):
        resolve(workspace, "../secret.txt")
