"""The demo workspace and users the embedded default starts with."""

import shutil
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from feedback import roles
from feedback.models import Workspace
from feedback.quota import folder_bytes

DEMO_FILES = Path(__file__).resolve().parent / "demo_workspace"
DEMO_USERS = [
    # (username, password, groups)
    ("staff", "staff-demo", [roles.STAFF]),
    ("operator", "operator-demo", [roles.OPERATOR]),
    ("reviewer", "reviewer-demo", [roles.REVIEWER]),
]


def seed_workspace() -> Workspace:
    workspace, _ = Workspace.objects.get_or_create(
        name="demo",
        defaults={"description": "Support inbox, a quarterly report and release notes."},
    )
    # Refreshed on every seed so an edited copy never drifts from the shipped files.
    shutil.copytree(DEMO_FILES, workspace.path, dirs_exist_ok=True)
    workspace.size_bytes = folder_bytes(workspace.path)
    workspace.save(update_fields=["size_bytes"])
    return workspace


def seed_users() -> list[tuple[str, str, list[str]]]:
    roles.ensure_groups()
    User = get_user_model()
    for username, password, groups in DEMO_USERS:
        # An address, so the password reset can be tried (its mail lands in var/mail/ by default).
        user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
        if created:
            user.set_password(password)
            user.save()
        user.groups.set(Group.objects.filter(name__in=groups))
    return DEMO_USERS
