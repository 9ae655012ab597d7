"""Masking of personal data and secrets before anything is stored (PRIVACY_MASKING, on by default).

What is masked: email addresses, phone numbers, card numbers (only digit runs that pass the Luhn
check, so order numbers and sums survive), API keys and tokens (sk-..., GitHub ghp_/gho_/...,
AWS AKIA..., Slack xox?-..., bearer tokens, this site's own afb_...) and the configured
OPENAI_API_KEY itself, whatever its form.

Masking applies to what is STORED (task text, system prompts, steps, final output, errors,
confirmations), never to what a tool receives at call time. An email address becomes a stable
pseudonym that is itself a syntactically valid address (``email.<hmac>@masked.invalid``), so a
model reading the masked history can still say "reply to that sender"; ``unmask_emails`` turns
the pseudonym back into the address at call time, looking it up in the run's own sandbox files
(the data the agent read it from), never in the database.
"""

import hashlib
import hmac
import re
from pathlib import Path
from typing import Any

from django.conf import settings

MASKED_DOMAIN = "masked.invalid"
PHONE_MASK = "[phone]"
CARD_MASK = "[card]"
SECRET_MASK = "[secret]"

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+")
_PSEUDONYM = re.compile(r"email\.[0-9a-f]{10}@" + re.escape(MASKED_DOMAIN))
# 13 to 19 digits, optionally grouped by spaces or dashes; kept only if the Luhn check passes.
_CARD = re.compile(r"(?<!\d)(?<!\d[.,])\d(?:[ -]?\d){12,18}(?!\d|[.,]\d)")
# Optional country code, then groups of digits split by spaces, dashes or a bracketed area
# code; 9 to 15 digits in all (E.164), so dates, times and small sums are left alone.
_PHONE = re.compile(r"(?<![\w+.])(?:\+\d{1,3}[ -]?)?(?:\(\d{1,4}\)[ -]?)?\d{2,4}(?:[ -]\d{2,4}){1,4}(?!\w|\.\d)")
_SECRETS = [
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # a JWT
    re.compile(r"\bafb_[A-Za-z0-9_-]{20,}"),  # this site's own API tokens (feedback/api/tokens.py)
]
_BEARER = re.compile(r"\b(Bearer|Token)\s+[A-Za-z0-9._~+/=-]{8,}", re.I)


def enabled() -> bool:
    return bool(getattr(settings, "PRIVACY_MASKING", True))


def email_pseudonym(address: str) -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), address.lower().encode(), hashlib.sha256).hexdigest()
    return f"email.{digest[:10]}@{MASKED_DOMAIN}"


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match) -> str:
    digits = re.sub(r"\D", "", match.group())
    return CARD_MASK if 13 <= len(digits) <= 19 and luhn_valid(digits) else match.group()


def _phone(match: re.Match) -> str:
    digits = re.sub(r"\D", "", match.group())
    return PHONE_MASK if 9 <= len(digits) <= 15 else match.group()


def _email(match: re.Match) -> str:
    address = match.group()
    return address if _PSEUDONYM.fullmatch(address) else email_pseudonym(address)


def mask_text(text: str) -> str:
    """``text`` with personal data and secrets masked (unchanged when masking is off)."""
    if not enabled() or not text:
        return text
    key = settings.OPENAI_API_KEY
    if key and len(key) >= 8:
        text = text.replace(key, SECRET_MASK)
    for pattern in _SECRETS:
        text = pattern.sub(SECRET_MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {SECRET_MASK}", text)
    text = _EMAIL.sub(_email, text)
    text = _CARD.sub(_card, text)
    return _PHONE.sub(_phone, text)


def mask(value: Any) -> Any:
    """Mask every string inside a JSON-like value (dicts, lists, strings); other values pass."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v) for v in value]
    return value


# Bounds on the sandbox scan: the pseudonyms of a run's own files are few and small.
_SCAN_MAX_FILES = 500
_SCAN_MAX_BYTES = 1024 * 1024


def unmask_emails(text: str, workspace: Path) -> str:
    """Replace email pseudonyms in ``text`` by the addresses they stand for, as found in the
    run's sandbox files; a pseudonym with no match there stays as it is."""
    wanted = set(_PSEUDONYM.findall(text))
    if not wanted:
        return text
    found: dict[str, str] = {}
    root = workspace.resolve()
    for count, path in enumerate(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        if count >= _SCAN_MAX_FILES or wanted <= found.keys():
            break
        try:
            content = path.read_bytes()[:_SCAN_MAX_BYTES].decode("utf-8", errors="ignore")
        except OSError:
            continue
        for address in _EMAIL.findall(content):
            found.setdefault(email_pseudonym(address), address)
    return _PSEUDONYM.sub(lambda m: found.get(m.group(), m.group()), text)
