"""The checker child's cache of parsed ground truths: bounded, only immutable parses, and a verdict
never depends on what was checked before against the same ground truth."""

from __future__ import annotations

from sympy import Integer, Matrix

from distrs.rewards import math_child

# A GRPO group: one prompt, n completions, right and wrong in any order (answers as boxed by
# math_reward: one box each).
GROUP = [
    ("\\frac{1}{2}", ["\\boxed{0.5}", "\\boxed{1/3}", "\\boxed{\\frac{2}{4}}", "\\boxed{}", "\\boxed{2}"]),
    ("\\{1, 2\\}", ["\\boxed{\\{2, 1\\}}", "\\boxed{2}", "\\boxed{\\{1, 3\\}}", "\\boxed{\\{1,2\\}}"]),
    ("2\\sqrt{3}", ["\\boxed{\\sqrt{12}}", "\\boxed{3\\sqrt{2}}", "\\boxed{2\\sqrt{3}}"]),
]


def _verdict(r: dict[str, object]) -> tuple[object, ...]:
    return tuple(r[k] for k in ("gold_ok", "found", "correct", "gold", "pred"))


def test_a_cached_ground_truth_gives_the_verdicts_of_a_fresh_parse() -> None:
    cache = math_child.GoldCache(16)
    for gold, answers in GROUP:
        fresh = [_verdict(math_child.check(gold, a, 5)) for a in answers]
        warm = [math_child.check(gold, a, 5, cache) for a in answers]
        # the first check parses and fills the cache, every later one of the group uses it
        assert [r["cached"] for r in warm] == [False] + [True] * (len(answers) - 1)
        assert [_verdict(r) for r in warm] == fresh, gold
        # and again in the reverse order: earlier completions leave nothing behind
        assert [_verdict(math_child.check(gold, a, 5, cache)) for a in reversed(answers)] == fresh[::-1]


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cache = math_child.GoldCache(2)
    for text in ("1", "2", "3"):
        math_child.check(text, "\\boxed{1}", 5, cache)
    assert cache.get("1") is None  # the oldest went first
    assert math_child.check("2", "\\boxed{2}", 5, cache)["cached"] is True
    math_child.check("4", "\\boxed{1}", 5, cache)  # "2" was used more recently than "3"
    assert cache.get("3") is None and cache.get("2") is not None and cache.get("4") is not None


def test_only_immutable_parses_of_short_texts_are_kept() -> None:
    cache = math_child.GoldCache(8)
    cache.put("m", [Matrix([[1, 2]]), "m"])  # a mutable matrix could be changed by a check
    cache.put("x" * (math_child.GOLD_CACHE_MAX_CHARS + 1), [Integer(1), "1"])
    cache.put("1", [Integer(1), "1"])
    assert cache.get("m") is None and cache.get("x" * (math_child.GOLD_CACHE_MAX_CHARS + 1)) is None
    assert cache.get("1") == (Integer(1), "1")  # a tuple: each check gets a fresh list of it
    assert math_child.GoldCache(0).get("1") is None


def test_an_unparseable_ground_truth_is_not_cached() -> None:
    cache = math_child.GoldCache(8)
    r = math_child.check("$", "\\boxed{1}", 5, cache)
    assert r["gold_ok"] is False and r["cached"] is False and cache.get("$") is None


def test_a_cached_answer_gives_the_verdicts_of_a_fresh_parse() -> None:
    """A GRPO group boxes the same few answers: the second time an answer's text comes (against
    any ground truth) its parse is reused, and every verdict equals a fresh check's."""
    answers = math_child.GoldCache(64)
    seen: set[str] = set()
    for gold, group in [*GROUP, ("0.5", ["\\boxed{0.5}", "\\boxed{1/3}", "\\boxed{2}"])]:
        for a in [*group, *group]:
            fresh = math_child.check(gold, a, 5)
            warm = math_child.check(gold, a, 5, None, answers)
            assert _verdict(warm) == _verdict(fresh), (gold, a)
            parsed = fresh["found"]
            assert warm["answer_cached"] is (parsed and a in seen), (gold, a)
            if parsed:
                seen.add(a)
    assert answers.get("\\boxed{}") is None  # nothing found in it: never kept
