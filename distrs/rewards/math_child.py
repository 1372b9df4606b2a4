"""Math answer checker run as a long-lived jailed child (see ``math_reward``).

Standalone on purpose (imports only math_verify): it runs from a copy in a sandbox work dir,
where the ``distrs`` package is not importable. Protocol: one JSON object per line on stdin
``{"id": int, "gold": str, "answer": str, "timeout": int}``; one JSON line per request on stdout
``{"id": int, "gold_ok": bool, "found": bool, "correct": bool, "gold": str, "pred": str}``.

Replies go to the original stdout only: ``sys.stdout`` is pointed at stderr before anything is
imported, so nothing a library prints while parsing a completion can slip a line into the reply
stream, and every reply carries the id of its request, so the parent can tell a reply from junk
and never hands one request's verdict to the next.
math_verify's own (SIGALRM) timeouts work here because this is the main thread; the parent
still kills the whole jail if a C-level computation ignores them.
"""

import json
import sys


def _first(parsed):
    return str(parsed[0]) if parsed else ""


def check(gold_text, answer_text, timeout):
    from math_verify import parse, verify

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
    if not gold:
        return {"gold_ok": False, "found": False, "correct": False, "gold": "", "pred": ""}
    pred = parse(answer_text, parsing_timeout=timeout)
    if not pred:
        return {"gold_ok": True, "found": False, "correct": False, "gold": _first(gold), "pred": ""}
    correct = bool(verify(gold, pred, timeout_seconds=timeout))
    return {"gold_ok": True, "found": True, "correct": correct, "gold": _first(gold), "pred": _first(pred)}


def main():
    replies = sys.stdout
    sys.stdout = sys.stderr  # library prints never reach the reply stream
    import math_verify  # noqa: F401  (import once, up front: it takes most of a second)

    replies.write('{"ready": true}\n')
    replies.flush()
    for line in sys.stdin:
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            res = check(str(req["gold"]), str(req["answer"]), int(req.get("timeout", 5)))
        except Exception as e:  # report, keep serving
            res = {"error": f"{type(e).__name__}: {e}"[:500]}
        res["id"] = rid
        replies.write(json.dumps(res) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
