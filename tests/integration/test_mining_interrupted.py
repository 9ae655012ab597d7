"""The mining job killed or failing half-way leaves no half-created strategy: each proposal (the
strategy, its first version, its evidence and its audit event) is written in one transaction.

The fault is placed exactly between the Strategy and the StrategyVersion writes by a trigger on
the StrategyVersion table: once it raises, once it holds the transaction while the mining
process is SIGKILLed.
"""

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from django.conf import settings
from django.db import DatabaseError, connection

from feedback.models import Strategy, StrategyEvent
from feedback.strategies.proposals import mine_and_propose

from ..strategy_history import planted_history
from .worker import test_database_url as database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

THRESHOLDS = {
    "STRATEGY_MIN_SUPPORT": "5",
    "STRATEGY_MIN_LIFT": "0.3",
    "STRATEGY_LOW_SCORE": "0.5",
}


@pytest.fixture(autouse=True)
def _thresholds(settings):
    for name, value in THRESHOLDS.items():
        setattr(settings, name, float(value) if "." in value else int(value))


@pytest.fixture
def version_trigger():
    """Install a BEFORE INSERT trigger on feedback_strategyversion with the given body."""
    installed = []

    def install(body: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute("CREATE SEQUENCE IF NOT EXISTS rel_version_inserts")
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION rel_version_fault() RETURNS trigger AS $$ BEGIN {body} "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER rel_version_fault BEFORE INSERT ON feedback_strategyversion "
                "FOR EACH ROW EXECUTE FUNCTION rel_version_fault()"
            )
        installed.append(True)

    yield install
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS rel_version_fault ON feedback_strategyversion")
        cursor.execute("DROP FUNCTION IF EXISTS rel_version_fault()")
        cursor.execute("DROP SEQUENCE IF EXISTS rel_version_inserts")


def _assert_no_half_strategy() -> None:
    for strategy in Strategy.objects.all():
        assert strategy.current_version_id is not None, strategy.pattern_key
        assert strategy.versions.count() >= 1
        assert strategy.evidence.count() == strategy.support > 0
        assert StrategyEvent.objects.filter(strategy=strategy, action=StrategyEvent.Action.PROPOSE).count() == 1


def test_a_failure_between_the_strategy_and_its_version_leaves_no_half_strategy(version_trigger):
    planted_history()
    version_trigger("IF nextval('rel_version_inserts') = 2 THEN RAISE EXCEPTION 'injected fault'; END IF;")
    with pytest.raises(DatabaseError, match="injected fault"):
        mine_and_propose(window_days=30)
    assert Strategy.objects.count() == 1  # the proposal before the fault is whole, the one at it is gone
    _assert_no_half_strategy()

    mine_and_propose(window_days=30)  # the next mining run completes the job, without duplicates
    keys = list(Strategy.objects.values_list("pattern_key", flat=True))
    assert len(keys) == len(set(keys)) >= 4
    _assert_no_half_strategy()


def test_the_mining_process_killed_mid_proposal_leaves_no_half_strategy(version_trigger, tmp_path):
    planted_history()
    version_trigger("IF nextval('rel_version_inserts') = 2 THEN PERFORM pg_sleep(60); END IF;")
    app = f"rel-mining-{os.getpid()}"
    # The server notices a vanished client during the sleep (as it would at its next write).
    url = f"{database_url()}?application_name={app}&options=-c%20client_connection_check_interval%3D200"
    env = {**os.environ, **THRESHOLDS, "DATABASE_URL": url, "VAR_DIR": str(tmp_path), "LLM_BACKEND": "offline"}
    code = "import django; django.setup(); from feedback.strategies.proposals import mine_and_propose; " \
           "mine_and_propose(window_days=30)"  # fmt: skip
    miner = subprocess.Popen([sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env)
    try:
        with psycopg.connect(database_url(), autocommit=True) as admin:
            deadline = time.monotonic() + 60
            while not admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event = 'PgSleep'", [app]
            ).fetchone():
                assert miner.poll() is None and time.monotonic() < deadline, "the miner never reached the fault"
                time.sleep(0.1)
            assert Strategy.objects.count() == 1  # one proposal committed; the second is mid-transaction
            miner.send_signal(signal.SIGKILL)
            miner.wait()
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", [app]).fetchone():
                assert time.monotonic() < deadline, "the killed miner's session never ended"
                time.sleep(0.1)
    finally:
        if miner.poll() is None:
            miner.kill()
    assert Strategy.objects.count() == 1
    _assert_no_half_strategy()
