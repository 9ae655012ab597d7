"""The one place that decides whether a path stays inside a run's workspace."""

import unicodedata
from pathlib import Path
from urllib.parse import unquote


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
