"""A small real MCP server for tests, built with the SDK's MCPServer (FastMCP in mcp 1.x).

    python tests/mcp_server.py stdio [--many] [--hang-at-start] [--starts-log=PATH]
    python tests/mcp_server.py http PORT [--many]

Its tools behave well (add, echo, pid, whoami, write_note, lookup_customer, refund_order) or badly on purpose:
crash (the process exits mid-call), hang (never answers), fail (an error result), malformed (a
reply that is not a CallToolResult). ``--many`` adds 45 tools of a made-up company's systems, for
tool retrieval. ``--hang-at-start``: the process starts and never answers anything, not even the
client's "initialize" (a server wedged at start). ``--starts-log=PATH``: each start appends the
process id to PATH, so a test can count how often the server was started. Not our code under
test: a stand-in for a team's own server.
"""

import os
import sys
import time
from pathlib import Path


def _option(name: str) -> str:
    return next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith(f"--{name}=")), "")


if __name__ == "__main__" and (_log := _option("starts-log")):
    # Before the SDK's import (a second or more): a start is counted even if stopped soon after.
    with open(_log, "a", encoding="utf-8") as starts:
        starts.write(f"{os.getpid()}\n")

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.types import ToolAnnotations  # noqa: E402


class _Malformed:
    """Server middleware: the reply to ``malformed`` is replaced with one of the wrong shape."""

    async def __call__(self, ctx, call_next):
        result = await call_next(ctx)
        if ctx.method == "tools/call" and (ctx.params or {}).get("name") == "malformed":
            return {"content": "this should be a list of blocks", "isError": "maybe"}
        return result


server = MCPServer("test-tools", log_level="WARNING", middleware=[_Malformed()])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Repeat the text back."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """Tell the server's process id."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> str:
    """Say whom the HTTP request's Authorization header names."""
    if (ctx.headers or {}).get("authorization") != "Bearer team-token-7":
        raise ToolError("no valid Authorization header")
    return "the team's agent"


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write a note file into the server's working directory."""
    Path(name).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters to {Path(name).resolve()}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_customer(email: str) -> dict:
    """Find a customer record by email address."""
    return {"email": email, "name": "Ada Lovelace", "api_key": "sk-" + "a1B2c3D4" * 4, "plan": "pro"}


@server.tool()
def refund_order(order_id: str, amount: float) -> str:
    """Refund an order (money leaves the company)."""
    return f"refunded {amount:.2f} on order {order_id}"


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def hang() -> str:
    """Never answer."""
    while True:
        time.sleep(1)


@server.tool()
def fail(reason: str) -> str:
    """Report a failure as a tool error result."""
    raise ToolError(f"the tracker refused: {reason}")


@server.tool()
def malformed() -> str:
    """Answer with a reply that is not a CallToolResult (see _Malformed)."""
    return "a well-formed answer that never leaves the server"


# A made-up company's systems: names and descriptions as real servers write them.
MANY = {
    "weather_forecast": "Get the weather forecast for a city for the next days.",
    "weather_alerts": "List severe weather alerts for a region.",
    "calendar_create_event": "Create a calendar event with a title, start and end time and attendees.",
    "calendar_list_events": "List calendar events between two dates.",
    "calendar_delete_event": "Delete a calendar event by its id.",
    "crm_find_contact": "Find a CRM contact by name or company.",
    "crm_update_contact": "Update the phone or address of a CRM contact.",
    "crm_log_call": "Log a sales call against a CRM contact.",
    "tracker_create_issue": "Create an issue in the bug tracker with a title and description.",
    "tracker_close_issue": "Close a bug tracker issue as fixed or won't fix.",
    "tracker_search_issues": "Search bug tracker issues by keyword, label or assignee.",
    "tracker_comment_issue": "Add a comment to a bug tracker issue.",
    "wiki_search_pages": "Search the internal wiki for pages about a topic.",
    "wiki_read_page": "Read an internal wiki page by its title.",
    "wiki_edit_page": "Edit the content of an internal wiki page.",
    "chat_post_message": "Post a message to a team chat channel.",
    "chat_list_channels": "List the team chat channels.",
    "chat_read_thread": "Read the messages of a chat thread.",
    "hr_vacation_balance": "Get an employee's remaining vacation days.",
    "hr_request_leave": "Request days of leave for an employee.",
    "payroll_payslip": "Fetch an employee's payslip for a month.",
    "invoice_create": "Create a customer invoice with line items.",
    "invoice_status": "Check whether a customer invoice has been paid.",
    "expense_submit": "Submit an expense claim with a receipt amount.",
    "inventory_stock_level": "Get the stock level of a product in a warehouse.",
    "inventory_reorder": "Reorder a product from its supplier.",
    "shipping_track_parcel": "Track a parcel by its tracking number.",
    "shipping_quote": "Quote the shipping cost of a parcel by weight and destination.",
    "translate_text": "Translate text between languages.",
    "currency_convert": "Convert an amount between currencies at today's exchange rate.",
    "stock_quote": "Get the latest share price of a listed company.",
    "news_headlines": "Get today's news headlines on a topic.",
    "maps_directions": "Get driving or walking directions between two addresses.",
    "maps_geocode": "Turn a street address into latitude and longitude.",
    "db_run_query": "Run a read-only SQL query on the analytics warehouse.",
    "db_list_tables": "List the tables of the analytics warehouse.",
    "metrics_dashboard": "Read a metrics dashboard's latest figures.",
    "deploy_service": "Deploy a service version to production.",
    "deploy_rollback": "Roll back a service to its previous version.",
    "oncall_who": "Tell who is on call for a service this week.",
    "pager_trigger": "Page the on-call engineer about an incident.",
    "password_reset_user": "Reset a user's password in the company directory.",
    "directory_lookup_user": "Look up a colleague in the company directory by name.",
    "meeting_room_book": "Book a meeting room for a time slot.",
    "lunch_menu": "Show the canteen's lunch menu for a day.",
}


def _answering(name: str):
    def tool(query: str = "") -> str:
        return f"{name}: {query}"

    return tool


def _register_many() -> None:
    for name, description in MANY.items():
        server.add_tool(_answering(name), name=name, description=description)


if __name__ == "__main__":
    if "--hang-at-start" in sys.argv:
        while True:
            time.sleep(1)
    if "--many" in sys.argv:
        _register_many()
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
