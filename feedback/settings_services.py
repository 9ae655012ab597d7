"""The state changes of the Settings pages (feedback/views/settings_*.py) and the admin's MCP
actions: saving a row with who changed it, switching an alert rule, listing an MCP server's tools."""

from django.contrib.auth.models import AbstractBaseUser
from django.forms import ModelForm

from feedback.agent.tools.mcp import ListedTool, list_and_store, listed_tools
from feedback.models import AlertRule, McpServer


def mcp_server_list_tools(*, server: McpServer) -> list[ListedTool]:
    """Connect to the server, keep its tool listing, and say which of its tools runs are offered.
    Raises ToolError, whose message says what went wrong, when it cannot be listed (the last
    listing stays, with the error beside it)."""
    list_and_store(server)
    return listed_tools(server)


# A connection test waits at most this long for the server to start or answer, whatever the
# server's own timeout (up to 10 minutes, for its runs): a person is waiting on the page.
MCP_TEST_TIMEOUT_SECONDS = 10.0
# Changing any of these reaches another server (or the same one otherwise): its listing is stale.
MCP_CONNECTION_FIELDS = frozenset({"transport", "command", "args", "env", "url", "headers", "timeout_seconds"})


def setting_save(*, form: ModelForm, by: AbstractBaseUser):
    """Save a valid Settings form, recording who changed the row. An MCP server whose connection
    changed loses its listing's date, so beat's refresh lists it again (its tools stay offered
    from the last listing until then)."""
    instance = form.save(commit=False)
    instance.updated_by = by
    if isinstance(instance, McpServer) and MCP_CONNECTION_FIELDS & set(form.changed_data):
        instance.listed_at = None
    instance.save()
    return instance


def alert_rule_toggle(*, rule: AlertRule, by: AbstractBaseUser) -> AlertRule:
    """Switch a rule on or off; off, beat no longer checks it (its open incidents stay as they are)."""
    rule.enabled = not rule.enabled
    rule.updated_by = by
    rule.save(update_fields=["enabled", "updated_by", "updated_at"])
    return rule


def mcp_server_test_connection(*, server: McpServer) -> list[ListedTool]:
    """``mcp_server_list_tools`` bounded by MCP_TEST_TIMEOUT_SECONDS: the server is started or
    reached on the MCP client's own thread, and a server that hangs costs the page that long."""
    list_and_store(server, timeout=MCP_TEST_TIMEOUT_SECONDS)
    return listed_tools(server)
