"""What every Settings page does alike: a form page (create or edit) and a delete confirmation.

Operators only (feedback/roles.py SETTINGS_PERMS); the views of each area check their own
permission before calling these.
"""

from django.contrib import messages
from django.db import models
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from feedback import settings_services

FORM_TEMPLATE = "feedback/settings/form.html"
DELETE_TEMPLATE = "feedback/settings/confirm_delete.html"


def edit_page(
    request: HttpRequest,
    *,
    form_class: type[ModelForm],
    instance: models.Model | None,
    title: str,
    back_url: str,
    section: str,
) -> HttpResponse:
    """GET shows the form; POST saves it and goes back to the list, or shows it again with the
    errors and everything as it was typed (status 400, so nothing is taken for saved)."""
    # Not ``request.POST or None``: a form of checkboxes all unticked posts nothing, and is a save.
    form = form_class(request.POST if request.method == "POST" else None, instance=instance)
    if request.method == "POST" and form.is_valid():
        saved = settings_services.setting_save(form=form, by=request.user)
        messages.success(request, _("“%(name)s” is saved.") % {"name": saved})
        return redirect(back_url)
    status = 400 if form.is_bound else 200
    context = {"form": form, "title": title, "back_url": back_url, "section": section, "instance": instance}
    return render(request, FORM_TEMPLATE, context, status=status)


def delete_page(
    request: HttpRequest, *, instance: models.Model, what: str, consequence: str, back_url: str, section: str
) -> HttpResponse:
    """GET asks for confirmation; POST deletes."""
    if request.method == "POST":
        name = str(instance)
        instance.delete()
        messages.success(request, _("“%(name)s” is deleted.") % {"name": name})
        return redirect(back_url)
    context = {"instance": instance, "what": what, "consequence": consequence, "back_url": back_url, "section": section}
    return render(request, DELETE_TEMPLATE, context)
