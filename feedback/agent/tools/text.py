import re
from collections import Counter
from typing import Any

from feedback.agent.sandbox import file_named

from .base import ToolContext, ToolError
from .files import read_text_file

_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*|\d+(?:[.,]\d+)*", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_STOPWORDS = frozenset(
    """a an and are as at be but by for from has have in is it its of on or that the this to was
    were will with we our you your they their not""".split()
)


def analyze_text(ctx: ToolContext, text: str = "", path: str = "") -> dict[str, Any]:
    if bool(text) == bool(path):
        raise ToolError("Give exactly one of 'text' or 'path'.")
    if path:
        text = read_text_file(ctx, path)["text"]
    elif found := file_named(ctx.workspace, text):
        # Small models pass the file's name as the text and report its two words as the file's:
        # a silent wrong answer. Said as an error, the model can correct the call, and mining sees it.
        raise ToolError(f"{text.strip()!r} is the name of a file in the workspace, not its text: pass path={found!r}.")
    words = _WORD.findall(text)
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    counts = Counter(w.lower() for w in words if w.lower() not in _STOPWORDS and not w.isdigit())
    return {
        "characters": len(text),
        "words": len(words),
        "sentences": len(sentences),
        "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        "top_words": [w for w, _ in counts.most_common(8)],
        "first_sentence": sentences[0].strip() if sentences else "",
    }


ANALYZE_TEXT = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "Text to analyse.", "maxLength": 200_000},
        "path": {
            "type": "string",
            "description": "Or: a text file in the workspace to analyse.",
            "maxLength": 500,
        },
    },
    "additionalProperties": False,
}
