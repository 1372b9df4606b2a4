"""kernelbench_payload and load_problem: KernelBench's field names, defaults, and bad input named."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import distrs_client
import pytest
from distrs_client.kernelbench import kernelbench_payload, load_problem

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales its input by a constant."""

    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


batch_size = 16
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.5]
'''


def test_defaults_in_kernelbench_field_names() -> None:
    assert kernelbench_payload(PROBLEM, completion="```python\nx = 1\n```") == {
        "original_model_src": PROBLEM,
        "completion": "```python\nx = 1\n```",
        "backend": "cuda",
        "precision": "fp32",
        "num_correct_trials": 5,
        "num_perf_trials": 100,
        "measure_performance": True,
    }


def test_every_option_set() -> None:
    p = kernelbench_payload(
        PROBLEM,
        custom_model_src="class ModelNew: ...",
        backend="triton",
        precision="bf16",
        num_correct_trials=1,
        num_perf_trials=10,
        atol=1e-2,
        rtol=0,
        tolerance="v0.1",
        measure_performance=False,
        reward="kevin",
    )
    assert p == {
        "original_model_src": PROBLEM,
        "custom_model_src": "class ModelNew: ...",
        "backend": "triton",
        "precision": "bf16",
        "num_correct_trials": 1,
        "num_perf_trials": 10,
        "atol": 0.01,
        "rtol": 0.0,
        "tolerance": "v0.1",
        "measure_performance": False,
        "reward": "kevin",
    }
    assert "completion" not in p


def test_cpp_backend_and_empty_completion_are_accepted() -> None:
    p = kernelbench_payload(PROBLEM, completion="", backend="cpp")
    assert p["completion"] == "" and p["backend"] == "cpp"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({}, "exactly one of completion or custom_model_src"),
        ({"completion": "a", "custom_model_src": "b"}, "exactly one of completion or custom_model_src"),
        ({"completion": b"bytes"}, "completion"),
        ({"custom_model_src": 3}, "custom_model_src"),
        ({"completion": "c", "backend": "hip"}, "backend"),
        ({"completion": "c", "backend": "CUDA"}, "backend"),
        ({"completion": "c", "precision": "fp8"}, "precision"),
        ({"completion": "c", "num_correct_trials": 0}, "num_correct_trials"),
        ({"completion": "c", "num_correct_trials": True}, "num_correct_trials"),
        ({"completion": "c", "num_perf_trials": 2.0}, "num_perf_trials"),
        ({"completion": "c", "num_perf_trials": -5}, "num_perf_trials"),
        ({"completion": "c", "atol": -1e-3}, "atol"),
        ({"completion": "c", "atol": "1e-2"}, "atol"),
        ({"completion": "c", "rtol": math.nan}, "rtol"),
        ({"completion": "c", "rtol": math.inf}, "rtol"),
        ({"completion": "c", "tolerance": ""}, "tolerance"),
        ({"completion": "c", "measure_performance": 1}, "measure_performance"),
        ({"completion": "c", "reward": " "}, "reward"),
    ],
)
def test_bad_values_raise_naming_the_argument(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        kernelbench_payload(PROBLEM, **kwargs)


@pytest.mark.parametrize("src", ["", "   \n", None])
def test_original_model_src_is_required(src: Any) -> None:
    with pytest.raises(ValueError, match="original_model_src"):
        kernelbench_payload(src, completion="c")


def test_load_problem_returns_the_source(tmp_path: Path) -> None:
    f = tmp_path / "1_Scale.py"
    f.write_text(PROBLEM, encoding="utf-8")
    assert load_problem(f) == PROBLEM
    assert load_problem(str(f)) == PROBLEM
    assert kernelbench_payload(load_problem(f), completion="c")["original_model_src"] == PROBLEM


@pytest.mark.parametrize(
    ("edit", "missing"),
    [
        (lambda s: s.replace("class Model(", "class Reference("), "Model"),
        (lambda s: s.replace("def get_inputs", "def inputs"), "get_inputs"),
        (lambda s: s.replace("def get_init_inputs", "def init_inputs"), "get_init_inputs"),
        (lambda s: s.split("batch_size")[0], "get_inputs, get_init_inputs"),
        # a name only defined inside a function does not count
        (
            lambda s: s.replace(
                "def get_inputs():\n    return", "def outer():\n    def get_inputs():\n        return"
            ),
            "get_inputs",
        ),
    ],
)
def test_load_problem_names_what_is_missing(tmp_path: Path, edit: Any, missing: str) -> None:
    f = tmp_path / "p.py"
    f.write_text(edit(PROBLEM), encoding="utf-8")
    with pytest.raises(ValueError, match=f"does not define {missing}$"):
        load_problem(f)


def test_load_problem_accepts_assigned_and_imported_names(tmp_path: Path) -> None:
    f = tmp_path / "p.py"
    f.write_text(
        "from base import Model\nget_inputs = lambda: []\nif True:\n    def get_init_inputs():\n        return []\n",
        encoding="utf-8",
    )
    assert load_problem(f).startswith("from base import Model")


def test_load_problem_rejects_invalid_python(tmp_path: Path) -> None:
    f = tmp_path / "broken.py"
    f.write_text("class Model(:\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.py is not valid Python: .*\(line 1\)"):
        load_problem(f)


def test_load_problem_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_problem(tmp_path / "absent.py")


def test_exported_from_the_package() -> None:
    assert distrs_client.kernelbench_payload is kernelbench_payload
    assert distrs_client.load_problem is load_problem
    assert {"kernelbench_payload", "load_problem"} <= set(distrs_client.__all__)
