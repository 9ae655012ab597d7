"""A run's sandbox: its own copy of its workspace, and the one place that decides whether a path
stays inside it."""

import shutil
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from django.conf import settings

if TYPE_CHECKING:
    from feedback.models import Run


def sandbox_path(run: "Run") -> Path:
    # Sub-agents work in the same files as the run that delegated to them.
    root = run
    while root.parent_id is not None:
        root = root.parent
    return Path(settings.RUN_SANDBOXES_ROOT) / str(root.pk)


def prepare_sandbox(run: "Run") -> Path:
    """The run's own copy of its task's workspace (kept as it is on resume)."""
    target = sandbox_path(run)
    if target.exists():
        return target
    source = run.task.workspace.path if run.task.workspace_id else None
    if source is not None and source.is_dir():
        # symlinks=True copies links as links, so one pointing outside is refused by the
        # sandbox instead of silently copying the outside file in.
        shutil.copytree(source, target, symlinks=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
    return target


class SandboxError(ValueError):
    """A path that would leave the workspace; the message is shown to the model as is."""


def _decoded_forms(path: str) -> list[str]:
    # Attackers hide ".." behind percent-encoding (even double), full-width dots or
    # backslashes; every form must stay inside, not only the literal one.
    forms = [path]
    current = path
    for _ in range(3):
        decoded = unquote(current)
        if decoded == current:
            break
        forms.append(decoded)
        current = decoded
    forms += [unicodedata.normalize("NFKC", f) for f in list(forms)]
    return [f.replace("\\", "/") for f in forms]


def resolve(workspace: Path, path: str) -> Path:
    """Return the absolute path of ``path`` inside ``workspace``, or raise SandboxError."""
    if not isinstance(path, str):
        raise SandboxError("The path must be a string.")
    if "\x00" in path:
        raise SandboxError("The path contains a NUL byte.")
    root = Path(workspace).resolve()
    for form in _decoded_forms(path.strip()):
        if form.startswith(("/", "~")) or (len(form) > 1 and form[1] == ":"):
            raise SandboxError(f"Absolute paths are not allowed: {path!r}. Use a path relative to the workspace.")
        if ".." in Path(form).parts:
            raise SandboxError(f"The path {path!r} tries to leave the workspace ('..' is not allowed).")
        candidate = (root / form).resolve()
        if candidate != root and root not in candidate.parents:
            raise SandboxError(f"The path {path!r} leads outside the workspace.")
    return (root / path.strip()).resolve()


def one_file_named(workspace: Path, name: str) -> Path | None:
    """The one regular file called ``name`` anywhere in the workspace; None if none or several."""
    candidates = [p for p in Path(workspace).rglob(name) if p.is_file() and not p.is_symlink()][:2]
    return candidates[0] if len(candidates) == 1 else None


def file_named(workspace: Path, value: str) -> str:
    """The workspace file a bare value names (relative path): the file at that path, else the
    one file of that name in a sub-folder; "" when it names none (or is not a name at all)."""
    name = value.strip()
    if not name or len(name) > 500 or any(c.isspace() for c in name):
        return ""
    try:
        if resolve(workspace, name).is_file():
            return name
    except SandboxError:
        return ""
    found = one_file_named(workspace, Path(name).name)
    return str(found.relative_to(Path(workspace).resolve())) if found else ""
