"""Fill a PostgreSQL database with the benchmarks' history (bench-only: the product has no such command).

DATABASE_URL=postgres://root@127.0.0.1:5432/bench python -m bench.generate --runs 100000
"""

import argparse
import os
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10, help="average steps per run")
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--long-runs", type=int, default=1, help="runs with --long-run-steps steps (traces)")
    parser.add_argument("--long-run-steps", type=int, default=1000)
    parser.add_argument("--strategies", type=int, default=60)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from bench.history import fill

    print(fill(**vars(args)))


if __name__ == "__main__":
    main()
