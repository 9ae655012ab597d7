"""Which tools go to the model when more are enabled than fit a prompt well.

Embeddings from the endpoint when one is configured; a lexical ranking (BM25 over each tool's
name and description) offline or when the embedding call fails. Engine tools always go.
"""

import logging
import math
import re
from collections import Counter

from django.conf import settings

from .llm import openai_client, use_endpoint
from .tools import Tool

logger = logging.getLogger(__name__)
_TOKEN = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("_", " "))


def _describe(tool: Tool) -> str:
    return f"{tool.name} {tool.name.replace('_', ' ')} {tool.description}"


def lexical_scores(query: str, tools: list[Tool]) -> dict[str, float]:
    docs = {t.name: _tokens(_describe(t)) for t in tools}
    avg = sum(len(d) for d in docs.values()) / max(1, len(docs))
    df = Counter(term for d in docs.values() for term in set(d))
    n, k1, b = len(docs), 1.5, 0.75
    scores = {}
    for name, doc in docs.items():
        tf = Counter(doc)
        score = 0.0
        for term in set(_tokens(query)):
            if term not in tf:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avg))
        scores[name] = score
    return scores


def embedding_scores(query: str, tools: list[Tool]) -> dict[str, float]:
    client = openai_client(max_retries=1)
    inputs = [query] + [_describe(t) for t in tools]
    vectors = [d.embedding for d in client.embeddings.create(model=settings.LLM_EMBEDDING_MODEL, input=inputs).data]

    def cosine(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=False))
        return dot / ((math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))) or 1.0)

    return {t.name: cosine(vectors[0], v) for t, v in zip(tools, vectors[1:], strict=True)}


def select_tools(task_text: str, tools: dict[str, Tool]) -> tuple[dict[str, Tool], str]:
    """The tools to offer and how they were chosen ("all", "embeddings" or "lexical")."""
    if len(tools) <= settings.TOOL_RETRIEVAL_THRESHOLD:
        return tools, "all"
    candidates = [t for t in tools.values() if not t.engine]
    method = "lexical"
    scores = None
    # No embedding model named (a local server without embeddings): rank lexically at once
    # rather than fail a call on every run.
    if use_endpoint() and settings.LLM_EMBEDDING_MODEL:
        try:
            scores, method = embedding_scores(task_text, candidates), "embeddings"
        except Exception as exc:  # any failure of the endpoint: rank offline instead
            logger.warning("tool retrieval by embeddings failed, using lexical ranking: %s", exc)
    if scores is None:
        scores = lexical_scores(task_text, candidates)
    ranked = sorted(candidates, key=lambda t: (-scores[t.name], t.name))[: settings.TOOL_RETRIEVAL_LIMIT]
    chosen = {t.name: t for t in tools.values() if t.engine}
    chosen.update({t.name: t for t in ranked})
    return chosen, method
