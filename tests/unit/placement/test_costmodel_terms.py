"""Each App. B.2 formula against values worked out by hand."""

from __future__ import annotations

import pytest

from distrs.placement import costmodel as cmod
from distrs.placement.specs import ModelShape

SHAPE = ModelShape(layers=2, hidden=4, intermediate=8)  # 4·16 + 3·4·8 = 160 params per layer


def test_params_per_layer():
    assert SHAPE.params_per_layer == 160


@pytest.mark.parametrize(
    ("seq", "expected"),
    [
        # qkvo 2·4·s·h² + attn 2·2·s²·h + mlp 2·3·s·h·h2 with h=4, h2=8
        (1, 2 * 4 * 16 + 2 * 2 * 1 * 4 + 2 * 3 * 4 * 8),  # 128 + 16 + 192 = 336
        (4, 2 * 4 * 4 * 16 + 2 * 2 * 16 * 4 + 2 * 3 * 4 * 4 * 8),  # 512 + 256 + 768 = 1536
    ],
)
def test_layer_flops(seq, expected):
    assert cmod.layer_flops(SHAPE, seq) == expected


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        (cmod.cv_tp, (1, 4, 4, 2), 2 * 1 * 4 * 4 * 2 * 1 / 2),  # B·mbs·seq·h·2(TP-1)/TP = 32
        (cmod.cv_tp, (2, 4, 4, 4), 2 * 2 * 4 * 4 * 2 * 3 / 4),  # 96
        (cmod.cv_tp, (2, 4, 4, 1), 0.0),
        (cmod.cv_pp, (2, 4, 4), 2 * 2 * 4 * 4),  # 64
        (cmod.cv_dp, (2, SHAPE, 2, 1), 2 * 2 * 160 * 2 * 1 / 2),  # 640
        (cmod.cv_dp, (1, SHAPE, 4, 2), 2 * 1 * 160 * 2 * 3 / 8),  # 240
        (cmod.cv_allgather, (2, SHAPE, 4), 2 * 2 * 160 * 3 / 4),  # 480
    ],
)
def test_volumes(fn, args, expected):
    assert fn(*args) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((3, 2, 1, 336.0, 100.0, 1, False), 3 * 2 * 1 * 336 / 100),  # 20.16
        ((3, 2, 1, 336.0, 100.0, 2, True), 3 * 3 * 2 * 1 * 336 / 200),  # 30.24
    ],
)
def test_comp_cost(args, expected):
    assert cmod.comp_cost(*args) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("train", "recompute", "factor"),
    [(False, True, 2), (True, True, 6), (True, False, 4)],
)
def test_tp_cost_factors(train, recompute, factor):
    assert cmod.tp_cost(3, 2, 0.5, train, recompute) == pytest.approx(factor * 3 * 2 * 0.5)


def test_pp_cost_forward_and_backward():
    assert cmod.pp_cost(5, 0.1, False) == pytest.approx(0.5)
    assert cmod.pp_cost(5, 0.1, True) == pytest.approx(1.0)


def test_hbm_cost():
    # seq_out·nm·mbs·B·nl·P/(dbs·hbm·TP) = 10·2·4·2·2·160/(8·1000·2)
    assert cmod.hbm_cost(10, 2, 4, 2, SHAPE, 8, 1000.0, 2) == pytest.approx(
        10 * 2 * 4 * 2 * 2 * 160 / (8 * 1000 * 2)
    )


def test_bubble_excludes_first_stage():
    assert cmod.bubble_cost([10.0, 4.0, 6.0], 5) == pytest.approx((4 + 6) / 5)
    assert cmod.bubble_cost([10.0], 5) == 0.0


@pytest.mark.parametrize(
    ("costs", "eta", "expected"),
    [
        ([3.0, 5.0, 2.0], 1.0, 5.0),  # fully parallel
        ([3.0, 5.0, 2.0], 0.0, 10.0),  # sequential
        ([3.0, 5.0, 2.0], 0.5, 5.0 + 0.5 * 5.0),
        ([], 0.5, 0.0),
    ],
)
def test_phi(costs, eta, expected):
    assert cmod.phi(costs, eta) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (10, [1, 1], [5, 5]),
        (10, [3, 1], [7, 3]),  # 1 + 8·3/4 = 7, 1 + 8·1/4 = 3
        (7, [1, 1, 1], [3, 2, 2]),
        (3, [100, 1, 1], [1, 1, 1]),
    ],
)
def test_balanced_split(total, weights, expected):
    parts = cmod.balanced_split(total, weights)
    assert parts == expected
    assert sum(parts) == total


def test_balanced_split_rejects_too_small_total():
    with pytest.raises(ValueError):
        cmod.balanced_split(2, [1, 1, 1])
