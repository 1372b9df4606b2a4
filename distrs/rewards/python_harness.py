"""Runs a python solution in a call-based or assert-based test (see ``python_reward``).

Standalone on purpose: copied into the jail's work dir next to ``main.py``, where ``distrs`` is
not importable. ``python harness.py call NAME`` executes ``main.py`` (as module ``solution``, so
its ``if __name__ == "__main__"`` block does not run), reads one JSON value per non-empty stdin
line as the positional arguments, calls ``NAME`` (a function, or a method of ``Solution()``,
LeetCode style) and prints the return value as JSON. ``python harness.py assert`` executes
``main.py`` and then the test code read from stdin in the same namespace; the case passes when it
exits 0. Written here rather than taken from a trainer so its behaviour is ours to test.
"""

import json
import sys


def _load():
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    namespace = {"__name__": "solution", "__file__": "main.py"}
    exec(compile(source, "main.py", "exec"), namespace)
    return namespace


def call(name):
    namespace = _load()
    args = [json.loads(line) for line in sys.stdin.read().splitlines() if line.strip()]
    fn = namespace.get(name)
    if fn is None and "Solution" in namespace:
        fn = getattr(namespace["Solution"](), name)
    if fn is None:
        sys.stderr.write(f"function {name!r} not found\n")
        sys.exit(1)
    result = fn(*args)
    sys.stdout.write(json.dumps(result, default=str) + "\n")


def run_assert():
    namespace = _load()
    test = sys.stdin.read()
    exec(compile(test, "<test>", "exec"), namespace)


if __name__ == "__main__":
    if sys.argv[1] == "call":
        call(sys.argv[2])
    else:
        run_assert()
