import os
from pathlib import Path
from typing import Any

from feedback.agent.sandbox import SandboxError, resolve

from .base import ToolContext, ToolError

MAX_READ_BYTES = 200_000
MAX_ENTRIES = 500
MAX_NAMED = 20  # files a missing file's error names
MAX_SCANNED = 1_000


def _resolve(ctx: ToolContext, path: str):
    try:
        return resolve(ctx.workspace, path)
    except SandboxError as exc:
        raise ToolError(str(exc)) from exc


def list_directory(ctx: ToolContext, path: str = ".") -> dict[str, Any]:
    target = _resolve(ctx, path)
    if not target.exists():
        raise ToolError(f"No such directory: {path!r}.")
    if not target.is_dir():
        raise ToolError(f"{path!r} is a file, not a directory.")
    entries = []
    for child in sorted(target.iterdir())[:MAX_ENTRIES]:
        is_dir = child.is_dir()
        entries.append(
            {
                "name": child.name + ("/" if is_dir else ""),
                "type": "directory" if is_dir else "file",
                "size": None if is_dir else child.stat().st_size,
            }
        )
    return {"path": path, "entries": entries}


def _missing(ctx: ToolContext, path: str, target: Path) -> str:
    """A missing file's error, naming the files in and under the nearest folder that exists: a
    small model guessed a name (inbox/outage.txt for a triage of inbox/), and told only to list the
    folder, it repeated the advice instead of listing it. The names are one quoted string and the
    folder is not named, so the error's signature (agent/errors.py) is one wherever the file was
    looked for and whatever the folder holds."""
    root = ctx.workspace.resolve()
    folder = target.parent
    while not folder.is_dir() and folder != root:
        folder = folder.parent
    names = sorted(_files_under(folder, root))
    if not names:
        return f"No such file: {path!r}. List the directory to see which files exist."
    listed = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
    return f'No such file: {path!r}. The files nearest to it are "{listed}": read one of them by its path.'


def _files_under(folder: Path, root: Path) -> list[str]:
    """The workspace paths of the regular files in and under ``folder`` (no link followed), of the
    first MAX_SCANNED entries walked: a large workspace costs a missing file no more than that."""
    found, seen = [], 0
    for here, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > MAX_SCANNED:
                return found
            file = Path(here) / name
            if file.is_file() and not file.is_symlink():
                found.append(file.relative_to(root).as_posix())
    return found


def read_text_file(ctx: ToolContext, path: str) -> dict[str, Any]:
    target = _resolve(ctx, path)
    if not target.exists():
        raise ToolError(_missing(ctx, path, target))
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory; use list_directory.")
    data = target.read_bytes()[: MAX_READ_BYTES + 1]
    try:
        text = data[:MAX_READ_BYTES].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path!r} is not a UTF-8 text file.") from exc
    return {"path": path, "text": text, "truncated": len(data) > MAX_READ_BYTES}


LIST_DIRECTORY = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "Directory relative to the workspace root; '.' is the root.",
            "maxLength": 500,
        }
    },
    "additionalProperties": False,
}

READ_TEXT_FILE = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "File path relative to the workspace root, e.g. 'docs/report.txt'.",
            "minLength": 1,
            "maxLength": 500,
        }
    },
    "required": ["path"],
    "additionalProperties": False,
}
