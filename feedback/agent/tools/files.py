from typing import Any

from feedback.agent.sandbox import SandboxError, resolve

from .base import ToolContext, ToolError

MAX_READ_BYTES = 200_000
MAX_ENTRIES = 500


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


def read_text_file(ctx: ToolContext, path: str) -> dict[str, Any]:
    target = _resolve(ctx, path)
    if not target.exists():
        raise ToolError(f"No such file: {path!r}. List the directory to see which files exist.")
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
