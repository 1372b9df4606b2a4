"""Whether an installed reward type's optional extra is missing here, by the type's name.

A reward type names the extra it needs in its descriptor (``RewardType.extra``: ``kernelbench``
needs ``distrs[kernels]``, torch and ninja, several GB that most installs never use). Where a
table is at hand, read ``table.reward_types[name].extra``; this answers by name alone, from the
installed types (``core/installed.py``), for ``GET /v1/reward-types``. Requests of a type whose
extra is missing end ``internal_error`` naming it, never a score.
"""

from __future__ import annotations

from distrs.core.installed import installed_types


def missing_extra(reward_type: str) -> str | None:
    """Why ``reward_type`` cannot run in this interpreter, or None when nothing is missing (or the
    type is not an installed one)."""
    rt = installed_types().get(reward_type)
    if rt is None or rt.extra is None:
        return None
    return rt.extra.missing()
