from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from feedback.storable import StorableJSONField

# No "__" and no "_" at either end: a tool's name in the registry is "<server>__<tool>", which
# then splits one way only and never equals a built-in's name (none has "__").
SERVER_NAME = r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$"
TIMEOUT_RANGE = [MinValueValidator(0.1), MaxValueValidator(600)]


def _strings(value, what: str, *, mapping: bool) -> None:
    if mapping:
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        shape = _('an object of names to text, e.g. {"TOKEN": "…"}')
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        shape = _('a list of text, e.g. ["--port", "8080"]')
    if not ok:
        raise ValidationError({what: _("Expected %(shape)s.") % {"shape": shape}})


class McpServer(models.Model):
    """An MCP server whose tools the agent may call: a command the worker starts (stdio) or a
    streamable HTTP endpoint. Its tool listing is kept here, so runs need not ask for it."""

    class Transport(models.TextChoices):
        STDIO = "stdio", _("stdio: a command the worker starts")
        HTTP = "http", _("streamable HTTP: a URL")

    name = models.CharField(
        _("name"),
        max_length=30,
        unique=True,
        validators=[RegexValidator(SERVER_NAME, _("Lower-case letters and digits, single - or _ between them."))],
        help_text=_("Its tools are offered as <name>__<tool>."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    transport = models.CharField(_("transport"), max_length=10, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(_("command"), max_length=500, blank=True, help_text=_("stdio: the program to start."))
    args = StorableJSONField(
        _("arguments"),
        default=list,
        blank=True,
        help_text=_('stdio: e.g. ["server.py"].'),
    )
    env = StorableJSONField(
        _("environment"),
        default=dict,
        blank=True,
        help_text=_("stdio: variables for the server, added to PATH, HOME, USER, SHELL, TERM and LOGNAME only."),
    )
    url = models.URLField(_("URL"), max_length=500, blank=True, help_text=_("HTTP: e.g. https://tools.example/mcp."))
    headers = StorableJSONField(
        _("headers"),
        default=dict,
        blank=True,
        help_text=_('HTTP: sent with every request, e.g. {"Authorization": "Bearer …"}.'),
    )
    timeout_seconds = models.FloatField(
        _("timeout (s)"),
        default=30.0,
        validators=TIMEOUT_RANGE,
        help_text=_("For starting or connecting to the server, and again for each call."),
    )
    expose = StorableJSONField(
        _("tools to expose"),
        default=list,
        blank=True,
        help_text=_("The server's names for the tools to offer; empty: all of them."),
    )
    tool_listing = models.JSONField(_("tool listing"), default=list, blank=True, editable=False)
    listed_at = models.DateTimeField(_("listed at"), null=True, blank=True, editable=False)
    list_error = models.TextField(_("last listing error"), blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    # Who last changed it on the Settings pages (feedback/views/settings_*.py); empty for the admin.
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, editable=False, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("MCP server")
        verbose_name_plural = _("MCP servers")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        _strings(self.args, "args", mapping=False)
        _strings(self.env, "env", mapping=True)
        _strings(self.headers, "headers", mapping=True)
        _strings(self.expose, "expose", mapping=False)
        if self.transport == self.Transport.STDIO and not self.command.strip():
            raise ValidationError({"command": _("A stdio server needs the command that starts it.")})
        if self.transport == self.Transport.HTTP and not self.url:
            raise ValidationError({"url": _("An HTTP server needs its URL.")})


class McpToolOverride(models.Model):
    """An operator's choice for one of a server's tools: off, sensitive, its timeout, its rules."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="overrides")
    tool = models.CharField(_("tool"), max_length=128, help_text=_("The server's name for it."))
    enabled = models.BooleanField(_("enabled"), default=True)
    sensitive = models.BooleanField(
        _("sensitive"), default=False, help_text=_("A reviewer confirms each call before it runs.")
    )
    timeout_seconds = models.FloatField(
        _("timeout (s)"),
        null=True,
        blank=True,
        validators=TIMEOUT_RANGE,
        help_text=_("Empty: the server's."),
    )
    result_rules = StorableJSONField(
        _("result rules"),
        default=list,
        blank=True,
        help_text=_('Layer-1 rules its results must pass, e.g. [{"type": "required_keys", "keys": ["id"]}].'),
    )

    class Meta:
        ordering = ["tool"]
        verbose_name = _("tool override")
        verbose_name_plural = _("tool overrides")
        constraints = [models.UniqueConstraint(fields=["server", "tool"], name="mcp_override_once_per_tool")]

    def __str__(self) -> str:
        return self.tool

    def clean(self) -> None:
        from feedback.evaluation.validation import check_rules

        problems = check_rules(self.result_rules)
        if problems:
            raise ValidationError({"result_rules": problems})
