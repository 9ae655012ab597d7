"""The offline demo model's reading of arithmetic: an expression for the calculator from a task
written in digits, in English words, or both ("What is seven times six plus three?", "add
twelve and thirty", "the sum of 3, 4 and 5", "two thousand and five minus 45").

What it reads: numbers as digits or words (zero to the billions, "forty-two", "one hundred and
five", "a thousand"); plus, minus, times, multiplied by, divided by, over, mod, to the power of,
squared, cubed; "add X and/to Y", "subtract X from Y", "multiply X by Y", "divide X by Y", "the
sum/product of X, Y and Z", "the difference between X and Y", "the square (root) of X". What it
does not: idioms ("a dozen", "half of", "a score", "twice"), fractions, percentages, ordinals.
Rules, not understanding: a task it cannot read gets no expression, and the model says so.
"""

import re

_UNITS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
}
_TENS = {word: 10 * n for n, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_NUMBER_WORDS = {*_UNITS, *_TENS, "hundred", *_SCALES}
_WORD = re.compile(r"[a-z]+")

# An operand once the numbers are digits: a number, or a bracketed part already rewritten.
_N = r"(?:sqrt)?\([^()]*\)|\d+(?:\.\d+)?"
_AND = r"\s*(?:,\s*and\b|,|\band\b)\s*"  # "3, 4 and 5", "3, 4, and 5"
_LIST = rf"((?:{_N})(?:{_AND}(?:{_N}))+)"
_PHRASES = [
    (rf"\b(?:the\s+)?sum\s+of\s+{_LIST}", lambda m: _joined(m[1], "+")),
    (rf"\b(?:the\s+)?product\s+of\s+{_LIST}", lambda m: _joined(m[1], "*")),
    (rf"\badd\s+({_N})\s+(?:and|to)\s+({_N})", "({1} + {2})"),
    (rf"\bsubtract\s+({_N})\s+from\s+({_N})", "({2} - {1})"),
    (rf"\btake\s+({_N})\s+(?:away\s+)?from\s+({_N})", "({2} - {1})"),
    (rf"\bmultiply\s+({_N})\s+(?:by|and)\s+({_N})", "({1} * {2})"),
    (rf"\bdivide\s+({_N})\s+by\s+({_N})", "({1} / {2})"),
    (rf"\b(?:the\s+)?difference\s+between\s+({_N})\s+and\s+({_N})", "({1} - {2})"),
    (rf"\b(?:the\s+)?square\s+root\s+of\s+({_N})", "sqrt({1})"),
    (rf"\b(?:the\s+)?square\s+of\s+({_N})", "({1} ** 2)"),
    (rf"({_N})\s+squared\b", "({1} ** 2)"),
    (rf"({_N})\s+cubed\b", "({1} ** 3)"),
]
_OPERATORS = [
    (r"\bmultiplied\s+by\b|\btimes\b", "*"),
    (r"\bdivided\s+by\b|\bover\b", "/"),
    (r"\bplus\b|\badded\s+to\b", "+"),
    (r"\bminus\b", "-"),
    (r"\bto\s+the\s+power\s+of\b", "**"),
    (r"\bmod(?:ulo)?\b", "%"),
]
_EXPRESSION = re.compile(r"(?:-\s*)?(?:sqrt)?[\d(](?:sqrt|[\d\s.+\-*/()%×÷^])*[\d)]")
_OPERATOR = re.compile(r"[+\-*/%×÷^]|sqrt")
# Words that change a quantity in ways these rules do not read: a task with one gets no expression
# (the model says it could not read it) rather than a wrong one ("half of 40 plus 9" is not 49).
_UNREAD = re.compile(r"\b(dozens?|half|halves|quarters?|thirds?|percent|per\s+cent|score|couple|twice|double|triple)\b")
_ARITHMETIC_WORDS = re.compile(
    r"\b(calculate|compute|sum|product|add|subtract|multiply|divide|plus|minus|times|squared|dozen|half|"
    r"percent|how much)\b"
)


def expression(task: str) -> str:
    """The calculation ``task`` asks for, as the calculator reads it; "" when none is found."""
    if _UNREAD.search(task.lower()):
        return ""
    text = digits_for_words(task.lower())
    for _ in range(10):  # an operand may itself be a phrase rewritten in the pass before
        rewritten = text
        for pattern, replacement in _PHRASES:
            rewritten = re.sub(pattern, _replacer(replacement), rewritten)
        if rewritten == text:
            break
        text = rewritten
    for pattern, symbol in _OPERATORS:
        text = re.sub(pattern, f" {symbol} ", text)
    candidates = [" ".join(m.group(0).split()) for m in _EXPRESSION.finditer(text)]
    candidates = [c for c in candidates if _OPERATOR.search(c.lstrip("- "))]
    return max(candidates, key=len) if candidates else ""


def looks_like_arithmetic(task: str) -> bool:
    """Numbers or the words of a calculation: a task the model should say it could not read,
    rather than that it does not do arithmetic."""
    text = task.lower()
    return bool(re.search(r"\d", text) or _ARITHMETIC_WORDS.search(text)) or any(
        w in _NUMBER_WORDS for w in _WORD.findall(text)
    )


def digits_for_words(text: str) -> str:
    """``text`` (lower case) with every number written in words replaced by its digits."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,000 is a thousand; "3, 4 and 5" three numbers
    words = list(_WORD.finditer(text))
    out, at, i = [], 0, 0
    while i < len(words):
        end = _number_run(words, i, text)
        if end == i:
            i += 1
            continue
        out += [text[at : words[i].start()], str(_value([w[0] for w in words[i:end]]))]
        at, i = words[end - 1].end(), end
    return "".join([*out, text[at:]])


def _number_run(words: list[re.Match], start: int, text: str) -> int:
    """The end (exclusive) of the run of number words from ``start``; ``start`` if none starts there."""
    i = start
    if words[i][0] == "a" and i + 1 < len(words) and words[i + 1][0] in ("hundred", *_SCALES):
        i += 1  # "a hundred", "a thousand"
    elif words[i][0] not in _NUMBER_WORDS:
        return start
    i += 1
    while i < len(words) and _joined_by_space(text, words[i - 1], words[i]):
        word = words[i][0]
        if word in _NUMBER_WORDS:
            i += 1
        elif (
            word == "and"  # "one hundred and five": only after a hundred or a scale, before a smaller number
            and words[i - 1][0] in ("hundred", *_SCALES)
            and i + 1 < len(words)
            and (words[i + 1][0] in _UNITS or words[i + 1][0] in _TENS)
            and _joined_by_space(text, words[i], words[i + 1])
        ):
            i += 2
        else:
            break
    return i


def _joined_by_space(text: str, left: re.Match, right: re.Match) -> bool:
    return re.fullmatch(r"\s+|\s*-\s*", text[left.end() : right.start()]) is not None


def _value(words: list[str]) -> int:
    total = current = 0
    for word in words:
        if word in _UNITS:
            current += _UNITS[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in _SCALES:
            total += max(current, 1) * _SCALES[word]
            current = 0
    return total + current


def _joined(operands: str, symbol: str) -> str:
    return "(" + f" {symbol} ".join(re.split(_AND, operands)) + ")"


def _replacer(replacement):
    if callable(replacement):
        return replacement
    return lambda m: replacement.format(*[m[0], *m.groups()])
