"""Settings: MCP servers, added, edited, removed, and their connection tested, by operators."""

from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from feedback import settings_services
from feedback.agent.tools.base import ToolError
from feedback.agent.tools.mcp import listed_tools
from feedback.models import McpServer
from feedback.settings_forms import McpServerForm

from .settings_common import delete_page, edit_page

SECTION = "mcp-servers"
TEMPLATE = "feedback/settings/mcp_server_list.html"


def _back() -> str:
    return reverse("feedback-settings-mcp-list")


def _rows(tested: McpServer | None = None, test: dict | None = None) -> list[dict]:
    rows = []
    for server in McpServer.objects.prefetch_related("overrides").select_related("updated_by"):
        tools = listed_tools(server)
        row = {"server": server, "offered": sum(t.offered for t in tools), "listed": len(tools), "test": None}
        if tested is not None and server.pk == tested.pk:
            row["test"] = test
        rows.append(row)
    return rows


@permission_required("feedback.view_mcpserver", raise_exception=True)
def mcp_server_list(request: HttpRequest) -> HttpResponse:
    return render(request, TEMPLATE, {"rows": _rows(), "section": SECTION})


@permission_required("feedback.add_mcpserver", raise_exception=True)
def mcp_server_create(request: HttpRequest) -> HttpResponse:
    return edit_page(
        request, form_class=McpServerForm, instance=None, title=_("New MCP server"), back_url=_back(), section=SECTION
    )


@permission_required("feedback.change_mcpserver", raise_exception=True)
def mcp_server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    server = get_object_or_404(McpServer, pk=server_id)
    title = _("MCP server “%(name)s”") % {"name": server.name}
    return edit_page(request, form_class=McpServerForm, instance=server, title=title, back_url=_back(), section=SECTION)


@permission_required("feedback.delete_mcpserver", raise_exception=True)
def mcp_server_delete(request: HttpRequest, server_id: int) -> HttpResponse:
    server = get_object_or_404(McpServer, pk=server_id)
    return delete_page(
        request,
        instance=server,
        what=_("the MCP server “%(name)s”") % {"name": server.name},
        consequence=_("Runs are no longer offered its tools; past runs keep their steps."),
        back_url=_back(),
        section=SECTION,
    )


@require_POST
@permission_required("feedback.change_mcpserver", raise_exception=True)
def mcp_server_test(request: HttpRequest, server_id: int) -> HttpResponse:
    """Start or reach the server (at most MCP_TEST_TIMEOUT_SECONDS for each answer) and show its
    tools, or what went wrong. The page sends it with htmx and gets the server's result box back."""
    server = get_object_or_404(McpServer.objects.prefetch_related("overrides"), pk=server_id)
    try:
        test = {"ok": True, "tools": settings_services.mcp_server_test_connection(server=server)}
    except ToolError as exc:
        test = {"ok": False, "error": str(exc)}
    if request.htmx:
        return render(request, TEMPLATE + "#mcp-test", {"server": server, "test": test})
    return render(request, TEMPLATE, {"rows": _rows(server, test), "section": SECTION})
