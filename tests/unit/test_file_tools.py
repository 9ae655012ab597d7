import os

import pytest

from feedback.agent.errors import error_signature
from feedback.agent.tools import ToolContext, ToolError
from feedback.agent.tools.files import list_directory, read_text_file
from feedback.agent.tools.http import http_get
from feedback.agent.tools.outbox import send_reply
from feedback.agent.tools.text import analyze_text

from .test_sandbox import HOSTILE_PATHS


@pytest.fixture
def ctx(tmp_path):
    ws = tmp_path / "ws"
    (ws / "inbox").mkdir(parents=True)
    (ws / "inbox" / "a.txt").write_text("Hello there. Second sentence!\nThird line")
    (ws / "binary.bin").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    os.symlink("/etc", ws / "link-out")
    os.symlink(tmp_path, ws / "link-up")
    return ToolContext(run_id=1, workspace=ws)


@pytest.mark.parametrize("path", HOSTILE_PATHS)
@pytest.mark.parametrize("tool", [read_text_file, list_directory, lambda ctx, path: analyze_text(ctx, path=path)])
def test_file_tools_refuse_every_hostile_path(ctx, tool, path):
    with pytest.raises(ToolError) as refused:
        tool(ctx, path=path)
    assert "TOP-SECRET-CONTENT" not in str(refused.value)
    assert "root:" not in str(refused.value)  # nothing of /etc/passwd either


def test_read_and_list(ctx):
    assert read_text_file(ctx, "inbox/a.txt")["text"].startswith("Hello there.")
    names = [e["name"] for e in list_directory(ctx, ".")["entries"]]
    assert names == ["binary.bin", "inbox/", "link-out/", "link-up/"]
    with pytest.raises(ToolError, match="No such file"):
        read_text_file(ctx, "inbox/b.txt")
    with pytest.raises(ToolError, match="not a UTF-8 text file"):
        read_text_file(ctx, "binary.bin")
    with pytest.raises(ToolError, match="is a directory"):
        read_text_file(ctx, "inbox")


def test_a_missing_files_error_names_the_files_of_the_nearest_folder_that_exists(ctx):
    # Run 9 on the local model: told only to list the folder, the model repeated the advice.
    (ctx.workspace / "inbox" / "b.txt").write_text("b")
    with pytest.raises(ToolError) as missing:
        read_text_file(ctx, "inbox/outage.txt")
    assert str(missing.value) == (
        "No such file: 'inbox/outage.txt'. The files nearest to it are \"inbox/a.txt, inbox/b.txt\": "
        "read one of them by its path."
    )
    # A folder that does not exist either: the files in and under the workspace (no link followed).
    with pytest.raises(ToolError, match=r'nearest to it are "binary.bin, inbox/a.txt, inbox/b.txt":') as anywhere:
        read_text_file(ctx, "mail/2024/a.txt")
    # Wherever it was looked for and however many files there are, the error's signature is one:
    # mining groups them.
    for i in range(30):
        (ctx.workspace / "inbox" / f"{i:02d}.txt").write_text("x")
    with pytest.raises(ToolError) as many:
        read_text_file(ctx, "inbox/outage.txt")
    assert "inbox/19.txt and 12 more" in str(many.value) and "inbox/20.txt" not in str(many.value)
    signatures = {error_signature("read_text_file", "ToolError", str(e.value)) for e in (missing, anywhere, many)}
    assert len(signatures) == 1
    # A folder with no file keeps the advice to list it.
    (ctx.workspace / "empty").mkdir()
    with pytest.raises(ToolError, match=r"^No such file: 'empty/a.txt'. List the directory"):
        read_text_file(ctx, "empty/a.txt")


def test_analyze_text(ctx):
    stats = analyze_text(ctx, path="inbox/a.txt")
    assert (stats["words"], stats["sentences"], stats["lines"]) == (6, 3, 2)
    with pytest.raises(ToolError, match="exactly one"):
        analyze_text(ctx, text="a", path="inbox/a.txt")


def test_analyze_text_refuses_a_file_name_given_as_the_text(ctx):
    # Issue 15: Qwen2.5-Coder-1.5B called analyze_text(text="report.txt") and reported 2 words.
    with pytest.raises(ToolError, match=r"'inbox/a.txt' is the name of a file in the workspace.*path='inbox/a.txt'"):
        analyze_text(ctx, text=" inbox/a.txt ")
    # A bare name finds the one file of that name in a sub-folder.
    with pytest.raises(ToolError, match=r"pass path='inbox/a.txt'"):
        analyze_text(ctx, text="a.txt")
    # Words that happen to look like a name, and names of what is not a file, are text.
    assert analyze_text(ctx, text="inbox/b.txt")["words"] == 3
    assert analyze_text(ctx, text="inbox")["words"] == 1
    assert analyze_text(ctx, text="../secret.txt")["words"] == 2
    # The same mistake is the same error, whichever file: mining counts it as one pattern.
    (ctx.workspace / "b.txt").write_text("Other words.")
    messages = []
    for name in ("a.txt", "b.txt"):
        with pytest.raises(ToolError) as refused:
            analyze_text(ctx, text=name)
        messages.append(error_signature("analyze_text", "ToolError", str(refused.value)))
    assert messages[0] == messages[1]


def test_http_get_refuses_hosts_off_the_allow_list(ctx, settings):
    settings.HTTP_GET_ALLOWED_HOSTS = ["127.0.0.1"]
    for url, message in [
        ("http://169.254.169.254/latest/meta-data", "not on the allow-list"),
        ("file:///etc/passwd", "Only http and https"),
        ("gopher://127.0.0.1/", "Only http and https"),
        ("http://127.0.0.1.evil.example/", "not on the allow-list"),
        ("http://user@10.0.0.1/", "not on the allow-list"),
    ]:
        with pytest.raises(ToolError, match=message):
            http_get(ctx, url)


def test_send_reply_writes_only_to_the_outbox(ctx):
    assert send_reply(ctx, "a@example.com", "Hi", "Body")["saved_as"] == "outbox/001-reply.txt"
    assert (ctx.workspace / "outbox" / "001-reply.txt").read_text().startswith("To: a@example.com")
    with pytest.raises(ToolError, match="not an email address"):
        send_reply(ctx, "not-an-address", "Hi", "Body")
