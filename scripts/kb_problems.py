"""The KernelBench problems the prepared GPU check judges, at KernelBench's own sizes.

Facts taken from KernelBench's public repository (``KernelBench/level1`` and ``level2`` after
its July 2025 enlargement, when every problem was made to run above 1 ms and ``torch.rand``
became the default input): each problem's shapes, ``get_inputs()``, ``get_init_inputs()`` and
the operations of its ``forward``. The reference sources here are written from those facts in
KernelBench's format (a ``Model``, module-level size constants, ``get_inputs()``,
``get_init_inputs()``), so that the check judges what a KernelBench user submits against.

Each problem can also be written at reduced sizes (``small``): the same code with smaller
constants, for running the references on a CPU and for the tests of this repository.

The memory figures say what one judging process holds at once (inputs, outputs, parameters):
a request runs two such processes on one GPU, so the GPU needs about twice that, plus the L2
flush buffer and comparison scratch (``distrs/rewards/kernelbench/memory_plan.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 10**9
GiB = 1 << 30
FLOAT32 = 4
H100_BYTES = 80 * GB  # an H100 80GB's memory, as its name counts it


@dataclass(frozen=True)
class Problem:
    """One KernelBench problem: its facts and how the check's candidate solves it."""

    key: str  # KernelBench's file name without .py
    source: str  # the file in KernelBench's repository
    consts: tuple[tuple[str, int | str], ...]  # module-level size constants, in order (str: an expression)
    small: dict[str, int]  # the integer constants at reduced size
    inputs: tuple[tuple[str, ...], ...]  # each input's shape, as constant names (all torch.rand)
    output: tuple[str, ...]  # the output's shape
    init: str  # get_init_inputs()'s list, as an expression of the constants
    model: str  # the Model class, as written in the reference source
    op: str  # what the reference computes, in words
    candidate: str  # what the check's CUDA candidate does, in words
    params: tuple[tuple[str, ...], ...] = ()  # parameter shapes (level 2's weights)
    timing_note: str = ""

    def sizes(self, scale: str = "full") -> dict[str, int]:
        """The integer constants at ``scale`` ("full": KernelBench's, "small": reduced)."""
        full = {k: v for k, v in self.consts if isinstance(v, int)}
        return full if scale == "full" else {**full, **self.small}

    def numel(self, shape: tuple[str, ...], scale: str = "full") -> int:
        s = self.sizes(scale)
        n = 1
        for d in shape:
            n *= s[d]
        return n

    def memory(self, scale: str = "full") -> dict[str, int]:
        """Bytes one judging process holds at once: inputs, output and parameters (no problem
        here keeps a temporary beside its output); ``two_processes``: a request's need."""
        inputs = sum(self.numel(sh, scale) for sh in self.inputs) * FLOAT32
        output = self.numel(self.output, scale) * FLOAT32
        params = sum(self.numel(sh, scale) for sh in self.params) * FLOAT32
        peak = inputs + output + params
        return {
            "inputs": inputs,
            "output": output,
            "params": params,
            "per_process": peak,
            "two_processes": 2 * peak,
        }


ELEMENTWISE = "4096 x 393216 float32 (6 GiB in, 6 GiB out)"


def _act_model(doc: str, expr: str) -> str:
    return (
        "class Model(nn.Module):\n"
        f'    """{doc}"""\n\n'
        "    def __init__(self):\n"
        "        super().__init__()\n\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
        f"        return {expr}\n"
    )


PROBLEMS: tuple[Problem, ...] = (
    Problem(
        key="19_ReLU",
        source="KernelBench/level1/19_ReLU.py",
        consts=(("batch_size", 4096), ("dim", 393216)),
        small={"batch_size": 7, "dim": 3001},
        inputs=(("batch_size", "dim"),),
        output=("batch_size", "dim"),
        init="[]",
        model=_act_model("ReLU of the input.", "torch.relu(x)"),
        op=f"torch.relu(x), x {ELEMENTWISE}",
        candidate="one element-wise kernel, grid-stride loop: x < 0 ? 0 : x (NaN kept, as torch.relu keeps it)",
    ),
    Problem(
        key="23_Softmax",
        source="KernelBench/level1/23_Softmax.py",
        consts=(("batch_size", 4096), ("dim", 393216)),
        small={"batch_size": 5, "dim": 5000},
        inputs=(("batch_size", "dim"),),
        output=("batch_size", "dim"),
        init="[]",
        model=_act_model("Softmax over dim 1.", "torch.softmax(x, dim=1)"),
        op=f"torch.softmax(x, dim=1), x {ELEMENTWISE}",
        candidate="one block of 1024 threads per row: max, sum of exp(x - max), then exp(x - max) / sum "
        "(three passes over the row, shared-memory tree reductions)",
    ),
    Problem(
        key="26_GELU_",
        source="KernelBench/level1/26_GELU_.py",
        consts=(("batch_size", 4096), ("dim", 393216)),
        small={"batch_size": 6, "dim": 2999},
        inputs=(("batch_size", "dim"),),
        output=("batch_size", "dim"),
        init="[]",
        model=_act_model("GELU (exact, erf form) of the input.", "torch.nn.functional.gelu(x)"),
        op=f"torch.nn.functional.gelu(x) (erf form), x {ELEMENTWISE}",
        candidate="one element-wise kernel: 0.5 x (1 + erf(x / sqrt 2))",
    ),
    Problem(
        key="36_RMSNorm_",
        source="KernelBench/level1/36_RMSNorm_.py",
        consts=(("batch_size", 112), ("features", 64), ("dim1", 512), ("dim2", 512)),
        small={"batch_size": 3, "features": 64, "dim1": 9, "dim2": 7},
        inputs=(("batch_size", "features", "dim1", "dim2"),),
        output=("batch_size", "features", "dim1", "dim2"),
        init="[features]",
        model=(
            "class Model(nn.Module):\n"
            '    """x divided by its root mean square over the feature dimension (dim 1)."""\n\n'
            "    def __init__(self, num_features: int, eps: float = 1e-5):\n"
            "        super().__init__()\n"
            "        self.num_features = num_features\n"
            "        self.eps = eps\n\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        rms = torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + self.eps)\n"
            "        return x / rms\n"
        ),
        op="x / sqrt(mean(x**2, dim=1) + 1e-5), x 112 x 64 x 512 x 512 float32 (7 GiB in, 7 GiB out)",
        candidate="one thread per (batch, position): sum of squares over the 64 features (stride "
        "512*512), then each feature divided by the root mean square",
        # x**2 is as large as x, but it is freed before the output is made, whose allocation
        # then reuses its block: the peak is the input and one output-sized tensor
    ),
    Problem(
        key="1_Square_matrix_multiplication_",
        source="KernelBench/level1/1_Square_matrix_multiplication_.py",
        consts=(("N", 4096),),
        small={"N": 67},
        inputs=(("N", "N"), ("N", "N")),
        output=("N", "N"),
        init="[]",
        model=(
            "class Model(nn.Module):\n"
            '    """C = A @ B for square matrices."""\n\n'
            "    def __init__(self):\n"
            "        super().__init__()\n\n"
            "    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:\n"
            "        return torch.matmul(A, B)\n"
        ),
        op="torch.matmul(A, B), A and B 4096 x 4096 float32 (N = 2048 * 2)",
        candidate="tiled fp32 GEMM: 64 x 64 output tiles, 16-deep slices of A and B in shared memory, "
        "each of 256 threads accumulating a 4 x 4 block in registers (no tensor cores, no TF32)",
        timing_note="compute-bound: about 137 GFLOP per call",
    ),
    Problem(
        key="76_Gemm_Add_ReLU",
        source="KernelBench/level2/76_Gemm_Add_ReLU.py",
        consts=(
            ("batch_size", 1024),
            ("in_features", 8192),
            ("out_features", 8192),
            ("bias_shape", "(out_features,)"),
        ),
        small={"batch_size": 70, "in_features": 50, "out_features": 130},
        inputs=(("batch_size", "in_features"),),
        output=("batch_size", "out_features"),
        params=(("out_features", "in_features"), ("out_features",)),
        init="[in_features, out_features, bias_shape]",
        model=(
            "class Model(nn.Module):\n"
            '    """relu(x @ W.T + bias): a bias-free linear layer, a bias added, then ReLU."""\n\n'
            "    def __init__(self, in_features, out_features, bias_shape):\n"
            "        super().__init__()\n"
            "        self.gemm = nn.Linear(in_features, out_features, bias=False)\n"
            "        self.bias = nn.Parameter(torch.randn(bias_shape))\n\n"
            "    def forward(self, x):\n"
            "        x = self.gemm(x)\n"
            "        x = x + self.bias\n"
            "        x = torch.relu(x)\n"
            "        return x\n"
        ),
        op="relu(x @ W.T + b), x 1024 x 8192, W 8192 x 8192 float32 (nn.Linear without bias, bias randn)",
        candidate="the same tiled GEMM reading W transposed, with the bias and ReLU fused into its "
        "epilogue: one kernel for the three operations",
        timing_note="compute-bound: about 137 GFLOP per call",
    ),
)
BY_KEY = {p.key: p for p in PROBLEMS}


def reference_source(p: Problem, scale: str = "full", sizes: dict[str, int] | None = None) -> str:
    """The problem in KernelBench's format, with its constants at ``scale`` (or ``sizes``)."""
    ints = {**p.sizes(scale), **(sizes or {})}
    lines = [f"{k} = {ints[k] if isinstance(v, int) else v}" for k, v in p.consts]
    shapes = ", ".join(f"torch.rand({', '.join(sh)})" for sh in p.inputs)
    return (
        "import torch\nimport torch.nn as nn\n\n\n"
        f"{p.model}\n\n" + "\n".join(lines) + "\n\n\n"
        f"def get_inputs():\n    return [{shapes}]\n\n\n"
        f"def get_init_inputs():\n    return {p.init}\n"
    )


def memory_table(gpu_bytes: int = H100_BYTES) -> list[dict[str, object]]:
    """Each problem's memory per judging process and per request, against ``gpu_bytes``."""
    rows: list[dict[str, object]] = []
    for p in PROBLEMS:
        m = p.memory()
        rows.append(
            {
                "problem": p.key,
                "per_process_gib": round(m["per_process"] / GiB, 2),
                "two_processes_gib": round(m["two_processes"] / GiB, 2),
                "fits": m["two_processes"] < gpu_bytes,
            }
        )
    return rows
