"""The three workload datasets (issue 25, point 1): arithmetic in words and digits, file analysis
of workspace files, support-email triage; 144 items each with a strict checker, 48 in the *mining*
split and 96 *held out* (never seen by strategies). Held out is the larger part: a paired experiment
decides only on enough pairs (its test is always valid, so more pairs may be added to a split that
was undecided), and on the local model 24 were too few to call a 10 : 3 split (run 2) and 48 a 9 : 2
one (docs/local-model.md, runs 2 and 11); mining needs only enough runs for a failure to recur.

They are generated, not hand-written, from a fixed seed, so every install has the same items and
each expected value is computed from the item itself (the expression, the file's text, which
emails were written urgent), never typed. The generator knows the answers; the agent never sees
this module, only the items' text and files.
"""

import random
from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from feedback.models import Dataset, DatasetItem, DatasetVersion, Task

SEED = 7
PER_FAMILY = 144
# Of each 8 of the first 96 items the last 4 are held out (48 mining, 48 held out: the workloads as
# they were first measured, unchanged); the 48 added after them are all held out.
HELD_OUT_EVERY = 8
HELD_OUT_FROM = 4
MINING_BEFORE = 96

_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()  # noqa: E501
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def in_words(n: int) -> str:
    """``n`` (0 to 9,999) in English words: 342 -> "three hundred forty-two"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        rest = f" {in_words(n % 100)}" if n % 100 else ""
        return f"{_ONES[n // 100]} hundred{rest}"
    rest = f" {in_words(n % 1000)}" if n % 1000 else ""
    return f"{in_words(n // 1000)} thousand{rest}"


def _numeric(value: float) -> dict:
    return {"expected": value, "checker": "numeric", "checker_options": {"tolerance": 0.01}}


# --- arithmetic ------------------------------------------------------------------------------------
def _digits(rng: random.Random) -> tuple[str, float]:
    a, b, c, d = rng.randint(12, 99), rng.randint(3, 40), rng.randint(2, 12), rng.randint(2, 30)
    form = rng.randrange(5)
    if form == 0:
        return f"What is ({a} + {b}) * {c}?", (a + b) * c
    if form == 1:
        return f"What is {a} * {c} - {b}?", a * c - b
    if form == 2:
        return f"Compute ({a} - {b}) * ({c} + {d}).", (a - b) * (c + d)
    if form == 3:
        q = a * c
        return f"What is {q} / {c} + {d}?", q / c + d
    p = rng.choice([5, 10, 15, 20, 25, 40])
    base = rng.randint(4, 60) * 20
    return f"What is {p}% of {base}?", p * base / 100


def _words(rng: random.Random) -> tuple[str, float]:
    a, b, c = rng.randint(12, 99), rng.randint(3, 40), rng.randint(2, 12)
    form = rng.randrange(4)
    if form == 0:
        return (f"Add {in_words(a)} and {in_words(b)}, then multiply the sum by {in_words(c)}. What is the result?",
                (a + b) * c)  # fmt: skip
    if form == 1:
        price = rng.randint(3, 25)
        return (f"A box of {in_words(a)} pencils costs {in_words(price)} dollars. What do {in_words(c)} boxes "
                "cost, in dollars?", price * c)  # fmt: skip
    if form == 2:
        total = a * c
        return (f"{in_words(total).capitalize()} chairs are set out in {in_words(c)} equal rows. After "
                f"{in_words(min(b, a - 1))} chairs are taken from each row, how many chairs are left in all?",
                (a - min(b, a - 1)) * c)  # fmt: skip
    start = rng.randint(200, 900)
    return (f"A tank holds {in_words(start)} litres. {in_words(a).capitalize()} litres are drawn off, then "
            f"{in_words(b)} litres are added. How many litres does it hold now?",
            start - a + b)  # fmt: skip


def arithmetic_items(rng: random.Random) -> list[dict]:
    items = []
    for n in range(PER_FAMILY):
        text, value = (_digits if n % 2 == 0 else _words)(rng)
        items.append({"kind": Task.Kind.ARITHMETIC, "text": text, "files": []} | _numeric(round(value, 4)))
    return items


# --- file analysis ---------------------------------------------------------------------------------
_VOCABULARY = """budget team release customer meeting report schedule review design service support
market product quality price delivery plan risk update office project manager staff order invoice
contract partner station garden river harbour library museum window morning evening weekend summer
winter engine signal network server storage backup record sample result figure chapter section
notes draft target growth sales region supplier travel""".split()
_FOLDERS = ("", "docs/", "notes/", "reports/")


def _text(rng: random.Random, lines: int) -> str:
    rows = []
    for _ in range(lines):
        words = rng.choices(_VOCABULARY, k=rng.randint(5, 12))
        rows.append(" ".join([words[0].capitalize(), *words[1:]]) + ".")
    return "\n".join(rows) + "\n"


def file_analysis_items(rng: random.Random) -> list[dict]:
    items = []
    for n in range(PER_FAMILY):
        folder = rng.choice(_FOLDERS)
        names = rng.sample(["summary", "minutes", "status", "overview", "brief", "memo", "log-notes"], k=3)
        files = [{"name": f"{folder}{name}.txt", "content": _text(rng, rng.randint(3, 9))} for name in names]
        target = files[0]
        words = target["content"].split()
        form = n % 4
        if form == 0:
            text, item = f"How many words are in {target['name']}?", _numeric(len(words))
        elif form == 1:
            lines = target["content"].count("\n")
            text, item = f"How many lines does {target['name']} have?", _numeric(lines)
        elif form == 2:
            word = rng.choice(words).strip(".").lower()
            times = sum(1 for w in words if w.strip(".").lower() == word)
            text = f"How many times does the word '{word}' appear in {target['name']} (in any case)?"
            item = _numeric(times)
        else:
            counts = {f["name"]: len(f["content"].split()) for f in files}
            # A tie for the longest has no one answer: lengthen the first file until none is left.
            # Any tie starts it, as the first 64 items were made, so that they stay as they were.
            tied = len(set(counts.values())) < len(counts)
            while tied:
                files[0]["content"] += _text(rng, 2)
                counts[files[0]["name"]] = len(files[0]["content"].split())
                tied = list(counts.values()).count(max(counts.values())) > 1
            longest = max(counts, key=counts.get)
            others = [name.rsplit("/", 1)[-1].removesuffix(".txt") for name in counts if name != longest]
            where = folder or "the workspace"
            text = f"Which text file in {where} has the most words? Name the file."
            item = {
                "expected": [longest.rsplit("/", 1)[-1].removesuffix(".txt")],
                "checker": "labels",
                "checker_options": {"forbidden": others},
            }
        items.append({"kind": Task.Kind.FILE_ANALYSIS, "text": text, "files": files} | item)
    return items


# --- support-email triage --------------------------------------------------------------------------
_URGENT = [
    (
        "site-down",
        "The whole site is down",
        "Since 9:00 no customer can open the shop; every page "
        "shows an error. We are losing orders every minute, please fix it immediately.",
    ),
    (
        "payments-failing",
        "Payments fail for every customer",
        "No card payment has gone through since this morning. Checkout says 'declined' for everyone. This is critical.",
    ),
    (
        "data-breach",
        "Someone logged into our admin account",
        "We got an alert that our admin account "
        "was used from an address we do not know, and customer data was exported. Please lock it now.",
    ),
    (
        "locked-before-deadline",
        "Locked out before today's filing deadline",
        "I cannot log in and our tax filing is due at 17:00 today. I need access back urgently.",
    ),
    (
        "outage-api",
        "API outage: every call returns 500",
        "Our integration has failed for two hours: every API call returns 500. Production is stopped on our side.",
    ),
]
_ROUTINE = [
    (
        "feature-question",
        "Can reports be exported to PDF?",
        "Hello, is there a way to export the monthly report as a PDF? No rush, just curious.",
    ),
    (
        "thank-you",
        "Thanks for the quick help",
        "Just writing to say thanks, the issue from last week is solved and everything works.",
    ),
    (
        "invoice-copy",
        "Copy of last year's invoice",
        "Could you send me a copy of invoice INV-1042 from last year when you have a moment?",
    ),
    ("newsletter", "Unsubscribe from the newsletter", "Please remove me from the monthly newsletter."),
    ("address-change", "New billing address", "Our office moved; please use the new address on future invoices."),
    (
        "training-date",
        "Training session next month",
        "Is the training session on the 14th next month still planned? We would like to send two people.",
    ),
]
_SENDERS = "ana.ruiz ben.okafor chen.wei dana.kowalski eli.haddad fay.nguyen gus.moreau hana.sato".split()


def triage_items(rng: random.Random) -> list[dict]:
    items = []
    for n in range(PER_FAMILY):
        urgent = rng.sample(_URGENT, k=rng.randint(1, 3))
        routine = rng.sample(_ROUTINE, k=rng.randint(2, 4))
        emails = [(e, True) for e in urgent] + [(e, False) for e in routine]
        rng.shuffle(emails)
        files, urgent_names, routine_names = [], [], []
        senders = rng.sample(_SENDERS, k=len(emails))
        for number, ((_slug, subject, body), is_urgent) in enumerate(emails, start=1):
            # Named by number and sender, not by subject: a name saying "site-down" would answer
            # the triage without the email being read.
            sender = senders[number - 1]
            stem = f"{number:03d}-{sender.split('.')[0]}"
            files.append({"name": f"inbox/{stem}.txt",
                          "content": f"From: {sender}@example.com\nSubject: {subject}\n\n{body}\n"})  # fmt: skip
            (urgent_names if is_urgent else routine_names).append(stem)
        if n % 3 == 2:
            text = "How many of the support emails in inbox/ are urgent? Read each one, then give the count."
            item = _numeric(len(urgent_names))
        else:
            text = ("Triage the support emails in inbox/: read each one and name every urgent email by its "
                    "file name (an outage, failing payments, a security problem or a deadline today).")  # fmt: skip
            item = {"expected": urgent_names, "checker": "labels", "checker_options": {"forbidden": routine_names}}
        items.append({"kind": Task.Kind.EMAIL_TRIAGE, "text": text, "files": files} | item)
    return items


FAMILIES: dict[str, tuple[str, Callable[[random.Random], list[dict]]]] = {
    "Workload: arithmetic": (
        "Arithmetic in digits and in words; the answer's last figure is checked.",
        arithmetic_items,
    ),
    "Workload: file analysis": (
        "Words, lines and a word's occurrences in workspace files; which file is longest.",
        file_analysis_items,
    ),
    "Workload: support-email triage": (
        "Name every urgent email (and no other), or count them.",
        triage_items,
    ),
}


def workload_items(name: str) -> list[dict]:
    """The items of the workload ``name`` (a key of FAMILIES), the same on every call."""
    rng = random.Random(f"{SEED}:{name}")
    items = FAMILIES[name][1](rng)
    for n, item in enumerate(items):
        held_out = n >= MINING_BEFORE or n % HELD_OUT_EVERY >= HELD_OUT_FROM
        item["split"] = DatasetItem.Split.HELD_OUT if held_out else DatasetItem.Split.MINING
    return items


def seed_workloads(*, user: AbstractBaseUser | None = None) -> list[DatasetVersion]:
    """Make each workload dataset that does not exist yet (its version 1); a dataset of that name
    already there, edited or not, is left as it is."""
    from feedback.datasets.services import dataset_version_create

    made = []
    for name, (description, _build) in FAMILIES.items():
        with transaction.atomic():
            dataset, created = Dataset.objects.get_or_create(
                name=name, defaults={"description": description, "created_by": user}
            )
            if created:
                made.append(dataset_version_create(
                    dataset=dataset, user=user, items=workload_items(name), note=f"Generated (seed {SEED})",
                ))  # fmt: skip
    return made
