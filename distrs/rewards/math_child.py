"""Math answer checker run as a long-lived jailed child (see ``math_reward``).

Standalone on purpose (imports only math_verify): it runs from a copy in a sandbox work dir,
where the ``distrs`` package is not importable. Protocol: one JSON object per line on stdin
``{"id": int, "gold": str, "answer": str, "timeout": int}``; one JSON line per request on stdout
``{"id": int, "gold_ok": bool, "found": bool, "correct": bool, "gold": str, "pred": str,
"cached": bool, "answer_cached": bool}``.

Replies go to the original stdout only: ``sys.stdout`` is pointed at stderr before anything is
imported, so nothing a library prints while parsing a completion can slip a line into the reply
stream, and every reply carries the id of its request, so the parent can tell a reply from junk
and never hands one request's verdict to the next.
math_verify's own (SIGALRM) timeouts work here because this is the main thread; the parent
still kills the whole jail if a C-level computation ignores them.

Parsed ground truths are kept in a small LRU (``--gold-cache N`` entries, keyed by the ground
truth's text): parsing the gold is about half of a check's CPU, and GRPO sends n completions per
prompt with the same ground truth. Only immutable parses are kept (SymPy expressions, immutable
matrices, strings; the cached tuple is copied into a fresh list per check), so what is cached is
a function of the ground truth's text alone and no completion can change what the next check
with that ground truth is compared against. The reply's ``cached`` says whether it was used.

Parsed answers are kept the same way (``--answer-cache N``, keyed by the answer's text as
``math_reward`` extracted it, under the same rules): the answer's parse is the other half of a
check, and the completions of a GRPO group mostly box the same few answers. A parse is a function
of the text alone, so a cached one gives exactly the verdict a fresh one would (the reply's
``answer_cached``); a parse that timed out (empty) is never kept.
"""

import json
import sys
from collections import OrderedDict

GOLD_CACHE_MAX_CHARS = 2000  # longer ground truths are parsed every time (bounded memory)


def _first(parsed):
    return str(parsed[0]) if parsed else ""


class GoldCache:
    """Parsed texts (ground truths, or answers) by text, least recently used dropped first."""

    def __init__(self, size):
        self.size = size
        self._items = OrderedDict()

    def get(self, text):
        parsed = self._items.get(text)
        if parsed is not None:
            self._items.move_to_end(text)
        return parsed

    def put(self, text, parsed):
        from sympy import Basic

        if self.size <= 0 or len(text) > GOLD_CACHE_MAX_CHARS:
            return
        if not all(isinstance(x, (Basic, str)) for x in parsed):
            return  # e.g. a mutable matrix: never shared between checks
        self._items[text] = tuple(parsed)
        self._items.move_to_end(text)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def parse_gold(gold_text, timeout):
    from math_verify import parse

    # A bare ground truth is read as LaTeX first ("\\{1, 2\\}" is a set, not the number 2).
    if "$" in gold_text or "\\boxed" in gold_text:
        candidates = [gold_text]
    else:
        candidates = ["$" + gold_text + "$", gold_text, "\\boxed{" + gold_text + "}"]
    gold = []
    for text in candidates:
        gold = parse(text, parsing_timeout=timeout)
        if gold:
            break
    return gold


def parse_answer(answer_text, timeout, cache=None):
    """(the answer's parse, whether it came from ``cache``)."""
    from math_verify import parse

    cached = cache.get(answer_text) if cache is not None else None
    if cached is not None:
        return list(cached), True
    pred = parse(answer_text, parsing_timeout=timeout)
    if pred and cache is not None:
        cache.put(answer_text, pred)
    return pred, False


def check(gold_text, answer_text, timeout, cache=None, answers=None):
    from math_verify import verify

    cached = cache.get(gold_text) if cache is not None else None
    if cached is not None:
        gold = list(cached)
    else:
        gold = parse_gold(gold_text, timeout)
        if gold and cache is not None:
            cache.put(gold_text, gold)
    out = {"cached": cached is not None, "answer_cached": False}
    if not gold:
        return {**out, "gold_ok": False, "found": False, "correct": False, "gold": "", "pred": ""}
    pred, out["answer_cached"] = parse_answer(answer_text, timeout, answers)
    if not pred:
        return {**out, "gold_ok": True, "found": False, "correct": False, "gold": _first(gold), "pred": ""}
    correct = bool(verify(gold, pred, timeout_seconds=timeout))
    return {
        **out,
        "gold_ok": True,
        "found": True,
        "correct": correct,
        "gold": _first(gold),
        "pred": _first(pred),
    }


def main():
    replies = sys.stdout
    sys.stdout = sys.stderr  # library prints never reach the reply stream

    def size(flag):
        return int(sys.argv[sys.argv.index(flag) + 1]) if flag in sys.argv else 0

    cache, answers = GoldCache(size("--gold-cache")), GoldCache(size("--answer-cache"))
    import math_verify  # noqa: F401  (import once, up front: it takes most of a second)

    replies.write('{"ready": true}\n')
    replies.flush()
    for line in sys.stdin:
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            res = check(str(req["gold"]), str(req["answer"]), int(req.get("timeout", 5)), cache, answers)
        except Exception as e:  # report, keep serving
            res = {"error": f"{type(e).__name__}: {e}"[:500]}
        res["id"] = rid
        replies.write(json.dumps(res) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
