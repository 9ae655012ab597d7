"""Settings: model prices and the built-in tools' enablement and timeouts, kept by operators."""

from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback.agent.tools import BUILTIN_TOOLS
from feedback.models import ModelPrice, ToolSetting
from feedback.settings_forms import ModelPriceForm, ToolSettingForm

from .settings_common import delete_page, edit_page


def _prices() -> str:
    return reverse("feedback-settings-price-list")


def _tools() -> str:
    return reverse("feedback-settings-tool-list")


@permission_required("feedback.view_modelprice", raise_exception=True)
def model_price_list(request: HttpRequest) -> HttpResponse:
    prices = list(ModelPrice.objects.select_related("updated_by"))  # by model, newest first
    now, current = timezone.now(), set()
    for price in prices:
        # Each model's first row that has started is the one in effect; those after it are past.
        if price.effective_from > now:
            price.state = "scheduled"
        elif price.model_name not in current:
            price.state = "current"
            current.add(price.model_name)
        else:
            price.state = "replaced"
    return render(request, "feedback/settings/model_price_list.html", {"prices": prices, "section": "prices"})


@permission_required("feedback.add_modelprice", raise_exception=True)
def model_price_create(request: HttpRequest) -> HttpResponse:
    return edit_page(
        request,
        form_class=ModelPriceForm,
        instance=None,
        title=_("New model price"),
        back_url=_prices(),
        section="prices",
    )


@permission_required("feedback.change_modelprice", raise_exception=True)
def model_price_edit(request: HttpRequest, price_id: int) -> HttpResponse:
    price = get_object_or_404(ModelPrice, pk=price_id)
    title = _("Price of “%(model)s”") % {"model": price.model_name}
    return edit_page(
        request, form_class=ModelPriceForm, instance=price, title=title, back_url=_prices(), section="prices"
    )


@permission_required("feedback.delete_modelprice", raise_exception=True)
def model_price_delete(request: HttpRequest, price_id: int) -> HttpResponse:
    price = get_object_or_404(ModelPrice, pk=price_id)
    return delete_page(
        request,
        instance=price,
        what=_("the price of “%(model)s”") % {"model": price.model_name},
        consequence=_("Calls made from now on are priced by the * row, or not at all; past steps keep their cost."),
        back_url=_prices(),
        section="prices",
    )


@permission_required("feedback.view_toolsetting", raise_exception=True)
def tool_setting_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for setting in ToolSetting.objects.select_related("updated_by"):
        tool = BUILTIN_TOOLS.get(setting.name)
        rows.append({"setting": setting, "tool": tool, "default_timeout": tool.timeout if tool else None})
    return render(request, "feedback/settings/tool_setting_list.html", {"rows": rows, "section": "tools"})


@permission_required("feedback.change_toolsetting", raise_exception=True)
def tool_setting_edit(request: HttpRequest, setting_id: int) -> HttpResponse:
    setting = get_object_or_404(ToolSetting, pk=setting_id)
    title = _("Tool “%(name)s”") % {"name": setting.name}
    return edit_page(
        request, form_class=ToolSettingForm, instance=setting, title=title, back_url=_tools(), section="tools"
    )
