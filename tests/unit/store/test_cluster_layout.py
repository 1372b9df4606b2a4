"""The cluster key layout and the pure helpers of the cluster lease path (no Redis)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from distrs.store.keys import ClusterKeys, Keys, slot_tags
from distrs.store.redis.leases import by_slot
from distrs.store.redis.topology.cluster import bound_of, order_heads


def test_a_tasks_keys_keep_its_name_verbatim_and_share_its_slot() -> None:
    k = ClusterKeys("distrs")
    task = "alice/gsm8k:v2"
    tag = "{distrs:t:alice/gsm8k:v2}"
    assert k.task_tag(task) == tag
    slot = key_slot(tag.encode())
    assert k.slot_of(task) == slot
    keys = [k.owner(task), k.history(task), k.span(task), k.batch(task, "b:1"), k.batch_results(task, "b"),
            k.request(task, "r"), k.queue("compile", task)]  # fmt: skip
    assert all(x.startswith(tag + ":") for x in keys)
    assert k.batch(task, "b:1") == tag + ":batch:b%3A1"  # ids escaped outside the tag, as before
    # the slot-scoped keys hash to the task's slot under another tag
    lease_id = f"{slot:04x}abc1"
    assert k.lease_slot(lease_id) == slot
    for x in (k.lease(lease_id), k.leases(slot), k.active(slot), k.stages(slot), k.unused(slot)):
        assert key_slot(x.encode()) == slot, x


def test_a_brace_in_a_task_name_cannot_end_its_tag_early() -> None:
    k = ClusterKeys("ns")
    # without escaping, "a}:batch:x" + "b" and "a" + "x}:batch:b" would be the same key
    assert k.batch("a}:batch:x", "b") != k.batch("a", "x}:batch:b")
    assert k.task_tag("a}b{c%") == "{ns:t:a%7Db%7Bc%25}"


def test_standalone_keys_are_unchanged() -> None:
    k = Keys("distrs")
    assert k.batch("alice/t", "b") == "{distrs}:batch:alice/t:b"
    assert k.queue("compile", "alice/t") == "{distrs}:queue:compile"
    assert k.leases(None) == "{distrs}:leases" and k.lease("L1") == "{distrs}:lease:L1"
    assert k.slot_of("alice/t") is None and k.lease_slot("L1") is None


def test_every_slot_has_a_tag() -> None:
    tags = slot_tags("distrs")
    assert len(tags) == 16384
    assert all(key_slot(t.encode()) == slot for slot, t in enumerate(tags))


def test_a_lease_id_that_is_not_ours_names_a_slot_without_failing() -> None:
    k = ClusterKeys("ns")
    assert k.lease_slot("zzzz-not-hex") == 0
    assert k.lease_slot("ffff1") == 0xFFFF % 16384


def test_heads_are_ordered_by_score_then_arrival_as_one_queue_would() -> None:
    tasks = ["a", "b", "c", "d"]
    heads = [
        [("00000000000000000007{x}:req:1", 650.0)],
        [],  # empty queue
        [("00000000000000000003{x}:req:2", 650.0)],
        [("00000000000000000009{x}:req:3", 610.0)],
    ]
    order = order_heads(tasks, heads)
    assert [t for _, _, t in order] == ["d", "c", "a"]
    assert bound_of(order[1]) == "650.0\n00000000000000000003"
    assert bound_of(None) == ""


def test_by_slot_keeps_input_order_per_slot() -> None:
    assert by_slot([3, None, 3, 1]) == {3: [0, 2], None: [1], 1: [3]}


def test_the_fence_of_a_key_is_another_key_of_its_slot() -> None:
    k = ClusterKeys("distrs")
    task = "alice/gsm8k"
    slot = k.slot_of(task)
    assert slot is not None
    lease_id = f"{slot:04x}abc1"
    for key in (k.request(task, "r"), k.queue("compile", task), k.lease(lease_id), k.leases(slot)):
        fence = k.fence(key)
        assert fence != key and key_slot(fence.encode()) == slot
    all_keys = [k.request(task, "r"), k.batch(task, "b"), k.owner(task), k.lease(lease_id), k.leases(slot)]
    assert k.fence(k.request(task, "r")) not in all_keys
    with pytest.raises(ValueError, match="no-tag"):
        k.fence("no-tag")
