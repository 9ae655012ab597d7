"""A first start that shows the product: a short, real history for the embedded default.

Every run here is a real run of the offline demo model in this process (the loop, the tools, the
evaluation chain), asked by the demo `staff` user, so every figure a page shows of it is true:
the mistakes are the model's own (the release notes it never finds, the idioms it cannot read),
the proposals are what mining found in them, the trial's figures are its runs'. A reviewer's
score (with a value of each score configuration), a re-run of a failed run and a proposal put on
trial are taken by the demo reviewer, as a person would take them on the pages; their audit
events say "seeded demo history". One run reads a status service that the seed starts beside it on
127.0.0.1 and that answers its first request with 503, as a service does while it starts: the
trace shows the tool's real failed attempt and its retry.
Seeded once, into a database without runs (``manage.py seed_demo``; ``--no-history`` skips it).
"""

import json
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test.utils import override_settings

from feedback.agent.loop import execute_run
from feedback.evaluation.chain import evaluate_run
from feedback.models import Run, ScoreConfig, ScoreValue, Strategy, Workspace

REASON = "seeded demo history"
SUBAGENT_TASK = "Use sub-agents to summarise report.txt and docs/meeting-notes.md"
STATUS_TASK = (
    "Check the demo status service at {url} and report what it says. (The seed ran this service on "
    "this machine while it wrote the history; it answers 503 while it starts.)"
)


@dataclass(frozen=True)
class History:
    runs: int
    proposals: int
    on_trial: str  # the title of the proposal put on trial, "" when mining proposed none


def seed_history(workspace: Workspace, *, runs: int = 40, trial_runs: int = 24, seed: int = 7) -> History | None:
    """The history, or None when the database already has runs (it is never seeded twice)."""
    from feedback.services import run_add_human_score, run_rerun
    from feedback.strategies.demo import _trial_workload, reviewers_pick, run_phase, workload
    from feedback.strategies.proposals import mine_and_propose
    from feedback.strategies.services import strategy_approve

    if Run.objects.exists():
        return None
    User = get_user_model()
    staff, reviewer = User.objects.get(username="staff"), User.objects.get(username="reviewer")
    rng = random.Random(seed)
    phase = run_phase("seed", workload(rng, runs, workspace), staff, workspace)

    proposals = mine_and_propose(window_days=None)
    picked = reviewers_pick([s for s in proposals if s.status == Strategy.Status.PROPOSED])[:1]
    for strategy in picked:
        strategy_approve(strategy=strategy, reviewer=reviewer, reason=REASON, trial_fraction=0.5)
        run_phase("trial", _trial_workload(rng, trial_runs, workspace), staff, workspace)

    ended = Run.objects.filter(pk__in=phase.run_ids)
    failed = ended.filter(outcome=Run.Outcome.NOT_ACCOMPLISHED).order_by("pk").first()
    if failed is not None:
        # The review queue's daily work: a person's verdict on a failure, and a re-run of it.
        correctness, problem, helpful = demo_score_configs()
        run_add_human_score(
            run=failed,
            user=reviewer,
            score=0.1,
            outcome=Run.Outcome.NOT_ACCOMPLISHED,
            comment="The answer misses the file the task names.",
            score_values=[
                ScoreValue(config=correctness, number=1),
                ScoreValue(config=problem, label="Wrong file"),
                ScoreValue(config=helpful, number=0),
            ],
        )
        with transaction.atomic():
            again = run_rerun(run=failed, user=staff)
        execute_run(again.pk)
        evaluate_run(again.pk)
    # A run that gives each file to a sub-agent, so the trace's tree has something to show.
    delegating = run_phase("seed", [("file_analysis", SUBAGENT_TASK, "")], staff, workspace)
    for child in Run.objects.filter(parent_id__in=delegating.run_ids).values_list("pk", flat=True):
        evaluate_run(child)  # as the worker would once the seed ends: every seeded run is scored
    # A tool call that failed for a moment and was retried, so the trace has one to show.
    with status_service() as url:
        run_phase("seed", [("general", STATUS_TASK.format(url=url), "")], staff, workspace)
    return History(runs=Run.objects.count(), proposals=len(proposals), on_trial=picked[0].title if picked else "")


class _StartingService(BaseHTTPRequestHandler):
    """A status endpoint that is still starting on its first request (503) and up after."""

    def do_GET(self) -> None:
        starting = self.server.asked == 0
        self.server.asked += 1
        body = json.dumps({"status": "starting" if starting else "ok", "requests_seen": self.server.asked})
        self.send_response(503 if starting else 200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass  # the seed's output is the logins, not an access log


@contextmanager
def status_service() -> Iterator[str]:
    """The address of a service on 127.0.0.1 that answers 503 once, then 200; allow-listed for
    http_get while it runs (the seed's own run is the only one that can reach it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StartingService)
    server.asked = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with override_settings(HTTP_GET_ALLOWED_HOSTS=[*settings.HTTP_GET_ALLOWED_HOSTS, "127.0.0.1"]):
            yield f"http://127.0.0.1:{server.server_address[1]}/status"
    finally:
        server.shutdown()
        server.server_close()


def demo_score_configs() -> tuple[ScoreConfig, ScoreConfig, ScoreConfig]:
    """What the demo's reviewers rate beside the 0–1 score: one configuration of each type."""
    Type = ScoreConfig.DataType
    correctness, _ = ScoreConfig.objects.get_or_create(
        name="Correctness",
        defaults={"data_type": Type.NUMERIC, "min_value": 1, "max_value": 5, "description": "1: wrong … 5: exact"},
    )
    problem, _ = ScoreConfig.objects.get_or_create(
        name="Main problem",
        defaults={
            "data_type": Type.CATEGORICAL,
            "categories": ["None", "Wrong file", "Wrong tool", "Misread the task", "Incomplete"],
            "description": "What went wrong first, if anything",
        },
    )
    helpful, _ = ScoreConfig.objects.get_or_create(
        name="Helpful", defaults={"data_type": Type.BOOLEAN, "description": "Would the person who asked use it?"}
    )
    return correctness, problem, helpful
