import hashlib
import re

_QUOTED = re.compile(r"(['\"]).*?\1")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")
_PATHLIKE = re.compile(r"\S*/\S*")


def normalise_message(message: str) -> str:
    """The message with the parts that vary between occurrences (names, numbers) blanked out."""
    text = _QUOTED.sub("<q>", message)
    text = _PATHLIKE.sub("<path>", text)
    text = _NUMBER.sub("<n>", text)
    return " ".join(text.lower().split())[:300]


def error_signature(tool: str, error_class: str, message: str) -> str:
    """What "the same error" means everywhere: tool + error class + normalised message."""
    key = f"{tool}|{error_class}|{normalise_message(message)}"
    return hashlib.sha1(key.encode()).hexdigest()
