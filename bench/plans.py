"""The query plans of every page family on the bench history: which index each page's queries use,
and which of the product's indexes no page uses (issue 24: index only what a page's plan needs).

    DATABASE_URL=postgres://root@127.0.0.1:5432/bench python -m bench.plans --urls 3 > plans.md
"""

import argparse
import os
import random
import re
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
USES = re.compile(r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)")


def _plans(client, path: str) -> list[tuple[str, str]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
    found = []
    with connection.cursor() as cursor:
        for query in queries.captured_queries:
            sql = query["sql"]
            if not sql.startswith("SELECT") or '"feedback_' not in sql:
                continue  # session, user and permissions: no page's own reads
            cursor.execute("EXPLAIN " + sql)
            found.append((sql, "\n".join(row[0] for row in cursor.fetchall())))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.plans", description=__doc__)
    parser.add_argument("--urls", type=int, default=3, help="URLs per page family")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from bench.dashboard import page_families
    from feedback.models import Run, Strategy

    settings.ALLOWED_HOSTS = ["*"]
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-operator"))
    families = page_families(random.Random(7), args.urls)
    strategies = list(Strategy.objects.values_list("pk", flat=True)[: args.urls])
    families += [("strategy list", ["/strategies/"]), ("strategy page", [f"/strategies/{pk}/" for pk in strategies])]
    used: set[str] = set()
    print(f"Plans at {Run.objects.count():,} runs.\n")
    for name, paths in families:
        print(f"### {name}\n")
        for path in paths:
            plans = _plans(client, path)
            names = sorted({m for _, plan in plans for m in USES.findall(plan)})
            used.update(names)
            print(f"- `{path}`: {len(plans)} reads; indexes used: {', '.join(names) or 'none'}")
        print("\n```")
        for sql, plan in _plans(client, paths[0]):
            print(sql[:300] + (" ..." if len(sql) > 300 else ""))
            print(plan + "\n")
        print("```\n")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexname, i.tablename FROM pg_indexes i WHERE i.schemaname = 'public' "
            "AND i.tablename LIKE 'feedback_%%' AND i.indexname NOT IN "
            "(SELECT conname FROM pg_constraint) ORDER BY i.tablename, i.indexname"
        )
        unused = [(index, table) for index, table in cursor.fetchall() if index not in used]
    print("### Indexes no page's plan uses\n")
    print("(Some serve writes, the beat jobs, mining or the API instead: check before dropping.)\n")
    for index, table in unused:
        print(f"- `{index}` on `{table}`")


if __name__ == "__main__":
    main()
