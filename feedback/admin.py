from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from feedback import models, settings_services, throttle
from feedback.agent.tools import ToolError
from feedback.agent.tools.mcp import listed_tools
from feedback.api import tokens as api_tokens
from feedback.models.alert import new_secret

NO_STORE = {"Cache-Control": "no-store"}


class StepInline(admin.TabularInline):
    model = models.Step
    extra = 0
    fields = ["index", "turn", "kind", "tool_name", "success", "duration_ms", "attempts", "error"]
    readonly_fields = fields
    show_change_link = True
    can_delete = False


@admin.register(models.Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "owner", "created_at"]
    list_filter = [("owner", admin.EmptyFieldListFilter)]  # shared (no owner) or someone's uploads
    raw_id_fields = ["owner"]


@admin.register(models.Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "text", "created_by", "created_at"]
    list_filter = ["kind"]
    search_fields = ["text"]
    raw_id_fields = ["created_by"]


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "task_kind", "status", "outcome", "score", "step_count", "created_at", "finished_at"]
    list_filter = ["status", "outcome", "task_kind", "llm_backend"]
    raw_id_fields = ["task", "parent", "parent_step"]
    readonly_fields = ["created_at", "started_at", "finished_at", "heartbeat_at"]
    inlines = [StepInline]


@admin.register(models.Step)
class StepAdmin(admin.ModelAdmin):
    list_display = ["run", "index", "kind", "tool_name", "success", "duration_ms"]
    list_filter = ["kind", "success", "tool_name"]
    raw_id_fields = ["run"]


@admin.register(models.Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ["run", "round", "evaluator", "kind", "status", "score", "accomplished", "created_at"]
    list_filter = ["kind", "status"]
    raw_id_fields = ["run", "author"]


@admin.register(models.EvaluationProfile)
class EvaluationProfileAdmin(admin.ModelAdmin):
    # Edits reach the next evaluation round at once; EvaluationProfile.clean() checks the list.
    list_display = ["task_kind", "review_below", "updated_at"]
    readonly_fields = ["updated_at"]


class StrategyVersionInline(admin.StackedInline):
    model = models.StrategyVersion
    extra = 0
    readonly_fields = ["number", "created_at", "author"]
    can_delete = False


@admin.register(models.Strategy)
class StrategyAdmin(admin.ModelAdmin):
    list_display = ["title", "status", "pattern_kind", "support", "updated_at"]
    list_filter = ["status", "pattern_kind"]
    # Status moves only through the services (they write the audit log), never by hand here.
    readonly_fields = ["status", "current_version", "trial_started_at", "created_at", "updated_at"]
    raw_id_fields = ["evidence"]
    inlines = [StrategyVersionInline]


@admin.register(models.StrategyEvent)
class StrategyEventAdmin(admin.ModelAdmin):
    list_display = ["strategy", "action", "from_status", "to_status", "actor", "created_at"]
    list_filter = ["action"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(models.ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    # Steps are priced when written: a change here prices the calls made from now on.
    list_display = ["model_name", "input_per_million", "output_per_million", "effective_from", "note", "updated_at"]
    list_editable = ["input_per_million", "output_per_million"]
    search_fields = ["model_name"]


@admin.register(models.ScoreConfig)
class ScoreConfigAdmin(admin.ModelAdmin):
    # The Settings page is where operators keep these; the admin reads them and archives.
    list_display = ["name", "data_type", "min_value", "max_value", "required", "archived", "updated_at"]
    list_filter = ["data_type", "archived"]
    search_fields = ["name"]


@admin.register(models.ToolSetting)
class ToolSettingAdmin(admin.ModelAdmin):
    list_display = ["name", "enabled", "timeout_seconds"]
    list_editable = ["enabled"]


class McpToolOverrideInline(admin.TabularInline):
    model = models.McpToolOverride
    extra = 0
    fields = ["tool", "enabled", "sensitive", "timeout_seconds", "result_rules"]


@admin.register(models.McpServer)
class McpServerAdmin(admin.ModelAdmin):
    """MCP servers whose tools the agent may call; *Test connection* lists their tools."""

    list_display = ["name", "transport", "enabled", "timeout_seconds", "offered", "listed_at", "list_error"]
    list_editable = ["enabled"]
    list_filter = ["transport", "enabled"]
    readonly_fields = ["listed_at", "list_error", "tools"]
    inlines = [McpToolOverrideInline]
    actions = ["test_connection"]

    @admin.display(description=_("tools offered"))
    def offered(self, server: models.McpServer) -> str:
        rows = listed_tools(server)
        return f"{sum(r.offered for r in rows)} / {len(rows)}" if server.listed_at else "—"

    @admin.display(description=_("tools (last listing)"))
    def tools(self, server: models.McpServer):
        rows = listed_tools(server) if server.pk else []
        if not rows:
            return gettext("None listed yet: use the action “Test connection and list tools”.")
        lines = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ((r.name, r.description, self._status(r), gettext("read-only") if r.read_only else "") for r in rows),
        )
        head = (gettext("offered as"), gettext("description"), gettext("status"), gettext("server's hint"))
        return format_html("<table><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>{}</table>", *head, lines)

    @staticmethod
    def _status(row) -> str:
        if not row.offered:
            return gettext("not offered: %(why)s") % {"why": row.note}
        return gettext("offered, sensitive") if row.sensitive else gettext("offered")

    @admin.action(description=_("Test connection and list tools"))
    def test_connection(self, request, queryset) -> None:
        for server in queryset:
            self._list(request, server)

    def _list(self, request, server: models.McpServer) -> None:
        try:
            rows = settings_services.mcp_server_list_tools(server=server)
        except ToolError as exc:
            self.message_user(
                request,
                gettext("%(server)s: could not list its tools. %(error)s") % {"server": server.name, "error": exc},
                messages.ERROR,
            )
            return
        offered = [r.name for r in rows if r.offered]
        message = ngettext(
            "%(server)s answered with %(count)d tool; offered: %(offered)s.",
            "%(server)s answered with %(count)d tools; offered: %(offered)s.",
            len(rows),
        ) % {"server": server.name, "count": len(rows), "offered": ", ".join(offered) or "—"}
        self.message_user(request, message, messages.SUCCESS)
        for row in rows:
            if not row.offered:
                why = gettext("%(tool)s is not offered: %(why)s") % {"tool": row.name, "why": row.note}
                self.message_user(request, why, messages.WARNING)

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("overrides")

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        server = form.instance
        if server.enabled and (
            not server.listed_at or settings_services.MCP_CONNECTION_FIELDS & set(form.changed_data)
        ):
            self._list(request, server)


@admin.register(models.ToolConfirmation)
class ToolConfirmationAdmin(admin.ModelAdmin):
    list_display = ["run", "tool_name", "status", "requested_at", "decided_by"]
    list_filter = ["status"]
    raw_id_fields = ["run", "decided_by"]


@admin.register(models.JobLock)
class JobLockAdmin(admin.ModelAdmin):
    # A lock whose worker died with its job frees itself when it expires; deleting it here frees it now.
    list_display = ("name", "acquired_at", "expires_at", "acquired_by")
    readonly_fields = ("name", "token", "acquired_at", "expires_at", "acquired_by")


@admin.register(models.LoginFailures)
class LoginFailuresAdmin(admin.ModelAdmin):
    """Who is locked out of logging in (feedback/throttle.py), and the way to let them back in."""

    list_display = ["scope", "key", "failures", "last_failure_at", "locked_until"]
    list_filter = ["scope"]
    search_fields = ["key"]
    readonly_fields = ["scope", "key", "failures", "last_failure_at"]
    actions = ["unlock"]

    @admin.display(description=_("locked until"))
    def locked_until(self, row: models.LoginFailures):
        return throttle.locked_until(row) or "—"

    @admin.action(description=_("Unlock: forget these failures"), permissions=["delete"])
    def unlock(self, request, queryset) -> None:
        count = queryset.delete()[0]
        message = ngettext("%(count)d lockout lifted.", "%(count)d lockouts lifted.", count) % {"count": count}
        self.message_user(request, message, messages.SUCCESS)

    def has_add_permission(self, request) -> bool:
        return False  # rows are the count of real failures only


@admin.register(models.AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    """Alert rules are written here; beat evaluates them every minute (feedback/alerts/)."""

    list_display = ["name", "kind", "task_kind", "enabled", "updated_at"]
    list_filter = ["kind", "enabled"]
    list_editable = ["enabled"]
    search_fields = ["name"]
    readonly_fields = ["secret", "created_at", "updated_at"]
    actions = ["rotate_secret"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "enabled", "min_runs"]}),
        (_("Score drop and error-rate rise"),
         {"fields": ["task_kind", "window_minutes", "threshold", "change", "error_measure"]}),
        (_("Stuck queue"), {"fields": ["queued_minutes", "heartbeat_minutes", "confirmation_minutes"]}),
        (_("Delivery"), {"fields": ["webhook_urls", "emails", "secret"],
                         "description": _("Every webhook POST is signed with the secret: see docs/alerts.md.")}),
        (None, {"fields": ["created_at", "updated_at"]}),
    ]  # fmt: skip

    @admin.action(description=_("Rotate the signing secret"), permissions=["change"])
    def rotate_secret(self, request, queryset) -> None:
        for rule in queryset:
            rule.secret = new_secret()
            rule.save(update_fields=["secret", "updated_at"])
        self.message_user(request, _("New secrets: give them to the receivers."), messages.SUCCESS)


class _ReadOnly(admin.ModelAdmin):
    """What the evaluation and the deliveries recorded: read, never edited by hand."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class AlertDeliveryInline(admin.TabularInline):
    model = models.AlertDelivery
    extra = 0
    fields = ["event", "channel", "target", "status", "attempts", "delivered_at"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(models.AlertIncident)
class AlertIncidentAdmin(_ReadOnly):
    list_display = ["rule", "subject", "state", "opened_at", "resolved_at"]
    list_filter = ["state", "rule"]
    inlines = [AlertDeliveryInline]


class AlertAttemptInline(admin.TabularInline):
    model = models.AlertAttempt
    extra = 0
    fields = ["number", "started_at", "duration_ms", "status_code", "outcome", "error"]
    readonly_fields = fields
    can_delete = False


@admin.register(models.AlertDelivery)
class AlertDeliveryAdmin(_ReadOnly):
    list_display = ["incident", "event", "channel", "status", "attempts", "created_at"]
    list_filter = ["status", "channel", "event"]
    inlines = [AlertAttemptInline]


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Everyone's API tokens (feedback/api/): make one for someone (shown once, on the page that
    follows), revoke, delete. Only the hash is stored: a lost token is revoked and replaced."""

    list_display = ["name", "user", "prefix", "scope", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["scope", ("revoked_at", admin.EmptyFieldListFilter), "expires_at"]
    search_fields = ["name", "prefix", "user__username"]
    raw_id_fields = ["user"]
    actions = ["revoke"]

    def get_fields(self, request, obj=None) -> list[str]:
        fields = ["user", "name", "scope", "expires_at"]
        return fields if obj is None else [*fields, "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        return [] if obj is None else ["user", "prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request, obj: models.ApiToken, form, change: bool) -> None:
        if not change:
            request.new_api_token = api_tokens.issue(obj)
        super().save_model(request, obj, form, change)

    def response_add(self, request, obj: models.ApiToken, post_url_continue=None):
        # The token, once, in this answer: not in a message, which would keep it in a cookie.
        context = {**self.admin_site.each_context(request), "opts": self.opts, "token": obj,
                   "raw": request.new_api_token, "title": _("API token created")}  # fmt: skip
        return TemplateResponse(request, "admin/feedback/apitoken/created.html", context, headers=NO_STORE)

    @admin.action(description=_("Revoke: the tokens stop working"), permissions=["change"])
    def revoke(self, request, queryset) -> None:
        count = sum(api_tokens.api_token_revoke(token=token, user=request.user) for token in queryset)
        message = ngettext("%(count)d token revoked.", "%(count)d tokens revoked.", count) % {"count": count}
        self.message_user(request, message, messages.SUCCESS)
