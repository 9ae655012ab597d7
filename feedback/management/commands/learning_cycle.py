from pathlib import Path

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from feedback.strategies import cycle_report
from feedback.strategies.cycle import FAMILIES, KINDS, cycle_reviewer, run_cycle


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.split(",") if name.strip()]


class Command(BaseCommand):
    help = (
        "The learning cycle on the workload datasets: the mining split as production runs, mining, a reviewer's "
        "pick, a paired experiment on the held-out split, promotion where it says promote, the held-out split "
        "again; writes a JSON report and a markdown before / after table (docs/local-model.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--families",
            type=_names,
            default=list(FAMILIES),
            help=f"Comma-separated, of: {', '.join(FAMILIES)} (default: all).",
        )
        parser.add_argument("--mining-items", type=int, help="Items of each mining split (default: all).")
        parser.add_argument("--held-out-items", type=int, help="Items of each held-out split (default: all).")
        parser.add_argument(
            "--auto-approve-as",
            metavar="USERNAME",
            help="The reviewer who picks, experiments, approves and promotes (recorded as such; an account of "
            "that name is made a reviewer without a password if it does not exist). Without it the cycle stops "
            "at the proposals.",
        )
        parser.add_argument(
            "--picks",
            type=int,
            default=1,
            help="Proposals picked per family (default 1); 0 measures the family's insight list alone.",
        )
        parser.add_argument(
            "--no-insight-lists",
            dest="insight_lists",
            action="store_false",
            help="Pick no insight list: measure the picked proposals only.",
        )
        parser.add_argument(
            "--kinds",
            type=_names,
            default=[],
            help=f"Strategy kinds also measured one by one, of: {', '.join(KINDS)} (default: none).",
        )
        parser.add_argument("--seed", type=int, default=7, help="The experiments' order of pairs.")
        parser.add_argument("--json", type=Path, default=settings.VAR_DIR / "learning-cycle.json")
        parser.add_argument("--markdown", type=Path, default=settings.VAR_DIR / "learning-cycle.md")

    def handle(self, *args, **options) -> None:
        for name, least in (("mining_items", 1), ("held_out_items", 1), ("picks", 0)):
            if options[name] is not None and options[name] < least:
                raise CommandError(f"--{name.replace('_', '-')} must be at least {least}.")
        try:
            reviewer = cycle_reviewer(options["auto_approve_as"]) if options["auto_approve_as"] else None
            report = run_cycle(
                families=options["families"],
                mining_limit=options["mining_items"],
                held_out_limit=options["held_out_items"],
                reviewer=reviewer,
                picks=options["picks"],
                insight_lists=options["insight_lists"],
                kinds=options["kinds"],
                seed=options["seed"],
                out=self._say,
                keep=lambda report: cycle_report.save(
                    report, json_path=options["json"], markdown_path=options["markdown"]
                ),
            )
        except (ValidationError, PermissionDenied) as exc:
            raise CommandError(" ".join(getattr(exc, "messages", [str(exc)]))) from exc
        cycle_report.save(report, json_path=options["json"], markdown_path=options["markdown"])
        self._say(cycle_report.markdown(report))
        self._say(f"Written: {options['json']} and {options['markdown']}")

    def _say(self, line: str) -> None:
        # Flushed line by line: on a real model the cycle runs for an hour, in the background.
        self.stdout.write(line)
        self.stdout.flush()
