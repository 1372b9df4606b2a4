"""Static checks on KernelBench candidates: honest kernels pass, each known hack is caught by its code."""

from __future__ import annotations

import pytest

from distrs.rewards.kernelbench.static_checks import check_source
from distrs.rewards.kernelbench.static_checks.cpp_text import global_kernel_names
from distrs.rewards.kernelbench.static_checks.findings import (
    FLAG_CHECKS,
    REJECTION_CHECKS,
    Finding,
    StaticReport,
)
from tests.unit.rewards.kernelbench import candidates as c

# ------------------------------------------------------------------------------------------------
# Honest candidates: no rejection, exactly the expected flags, the kernels named.

HONEST = [
    ("relu", c.RELU_CUDA, "cuda", set(), ("relu_kernel",)),
    ("elementwise_add", c.ADD_CUDA, "cuda", set(), ("add_kernel",)),
    ("row_softmax", c.SOFTMAX_CUDA, "cuda", set(), ("row_softmax_kernel",)),
    ("matmul_tiled", c.MATMUL_TILED_CUDA, "cuda", set(), ("matmul_tiled_kernel",)),
    ("fused_linear_relu", c.FUSED_LINEAR_RELU_CUDA, "cuda", {"torch_ops_in_forward"}, ("bias_relu_kernel",)),
    ("scale_shift_cpu", c.SCALE_CPP, "cpp", set(), ()),
    ("triton_add", c.TRITON_ADD, "triton", set(), ("add_kernel",)),
    ("gelu_autograd", c.GELU_AUTOGRAD_CUDA, "cuda", set(), ("gelu_fwd",)),
    ("lazy_build", c.LAZY_BUILD_CUDA, "cuda", set(), ("square_kernel",)),
    ("triton_softmax_autotune", c.TRITON_SOFTMAX_AUTOTUNE, "triton", set(), ("softmax_rows",)),
]


@pytest.mark.parametrize(
    ("src", "backend", "flags", "kernels"), [h[1:] for h in HONEST], ids=[h[0] for h in HONEST]
)
def test_honest_candidates_pass(src: str, backend: str, flags: set[str], kernels: tuple[str, ...]) -> None:
    report = check_source(src, backend)
    assert report.rejections == ()
    assert report.ok
    assert {f.check for f in report.flags} == flags
    assert report.kernel_names == kernels


def test_fused_linear_relu_flag_names_the_torch_call_and_line() -> None:
    report = check_source(c.FUSED_LINEAR_RELU_CUDA, "cuda")
    (flag,) = report.flags
    assert flag == Finding("torch_ops_in_forward", "ModelNew.forward calls F.linear (line 47).")


# ------------------------------------------------------------------------------------------------
# Hacks: built from the honest ReLU candidate by changing one thing.

PRELUDE, _, RELU_MODEL = c.RELU_CUDA.partition("class ModelNew(nn.Module):")
RELU_MODEL = "class ModelNew(nn.Module):" + RELU_MODEL


def with_model(model: str, prelude: str = PRELUDE) -> str:
    """The ReLU candidate's imports and build with another ModelNew."""
    return prelude + model


def with_forward(body: str, extra: str = "") -> str:
    """The ReLU candidate whose forward body is ``body`` (8-space indented lines)."""
    return with_model(
        f"{extra}\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"        self.ext = relu_ext\n\n    def forward(self, x):\n{body}\n"
    )


def with_cuda(extra_cuda: str) -> str:
    """The ReLU candidate with more CUDA source appended to its kernel string."""
    return c.RELU_CUDA.replace('    return y;\n}\n"""', "    return y;\n}\n" + extra_cuda + '\n"""', 1)


def prepend(lines: str) -> str:
    return lines + "\n" + c.RELU_CUDA


HACKS: list[tuple[str, str, str, str]] = [
    # (id, source, backend, the check that must fire)
    (
        "syntax_error",
        "class ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n",
        "cuda",
        "syntax_error",
    ),
    ("no_model_new", c.RELU_CUDA.replace("class ModelNew", "class ModelFast"), "cuda", "no_model_new"),
    (
        "no_build_call",
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n",
        "cuda",
        "no_custom_kernel",
    ),
    (
        "cuda_sources_missing",
        c.RELU_CUDA.replace("    cuda_sources=relu_cuda_source,\n", ""),
        "cuda",
        "no_custom_kernel",
    ),
    (
        "cuda_sources_without_global",
        c.RELU_CUDA.replace("__global__ void relu_kernel", "__device__ void relu_kernel"),
        "cuda",
        "no_custom_kernel",
    ),
    (
        "cuda_sources_unresolvable",
        c.RELU_CUDA.replace("cuda_sources=relu_cuda_source", "cuda_sources=open('k.cu').read()"),
        "cuda",
        "no_custom_kernel",
    ),
    (
        "cuda_sources_empty",
        c.RELU_CUDA.replace("cuda_sources=relu_cuda_source", "cuda_sources='  \\n'"),
        "cuda",
        "no_custom_kernel",
    ),
    (
        "cpp_only_declaration",
        c.RELU_CUDA.replace("cuda_sources=relu_cuda_source,", ""),
        "cpp",
        "no_custom_kernel",
    ),
    ("triton_without_jit", c.TRITON_ADD.replace("@triton.jit\n", ""), "triton", "no_custom_kernel"),
    ("forward_ignores_extension", with_forward("        return torch.relu(x)"), "cuda", "kernel_not_called"),
    (
        "triton_kernel_never_launched",
        c.TRITON_ADD.replace("return triton_add(x.contiguous(), y.contiguous())", "return x + y"),
        "triton",
        "kernel_not_called",
    ),
    (
        "try_in_forward",
        with_forward(
            "        try:\n            return self.ext.relu_cuda(x)\n"
            "        except RuntimeError:\n            return torch.relu(x)"
        ),
        "cuda",
        "try_except_fallback",
    ),
    (
        "try_around_build",
        c.RELU_CUDA.replace("relu_ext = load_inline(", "try:\n    relu_ext = load_inline(").replace(
            "    verbose=False,\n)\n", "    verbose=False,\n)\nexcept Exception:\n    relu_ext = None\n"
        ),
        "cuda",
        "try_except_fallback",
    ),
    (
        "suppress_in_helper",
        with_forward(
            "        return run(self.ext, x)",
            extra="import contextlib\n\ndef run(ext, x):\n    with contextlib.suppress(Exception):\n"
            "        return ext.relu_cuda(x)\n    return x.clamp_min(0)\n",
        ),
        "cuda",
        "try_except_fallback",
    ),
    (
        "subclasses_model",
        with_model(
            "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
            "class ModelNew(Model):\n    def __init__(self):\n        super().__init__()\n"
            "        self.ext = relu_ext\n"
            "    def forward(self, x):\n        self.ext.relu_cuda(x)\n        return super().forward(x)\n"
        ),
        "cuda",
        "reference_fallback",
    ),
    (
        "wraps_reference_instance",
        with_forward(
            "        self.ext.relu_cuda(x)\n        return self.ref(x)",
            extra="class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
        ).replace("self.ext = relu_ext\n", "self.ext = relu_ext\n        self.ref = Model()\n"),
        "cuda",
        "reference_fallback",
    ),
    (
        "alias_of_model",
        c.RELU_CUDA.replace("class ModelNew(nn.Module):", "class Fast(nn.Module):") + "\nModelNew = Model\n",
        "cuda",
        "reference_fallback",
    ),
    (
        "side_stream_python",
        with_forward(
            "        s = torch.cuda.Stream()\n        with torch.cuda.stream(s):\n"
            "            y = self.ext.relu_cuda(x)\n        return y"
        ),
        "cuda",
        "extra_stream",
    ),
    (
        "side_stream_cuda",
        c.RELU_CUDA.replace(
            "at::cuda::getCurrentCUDAStream()",
            "[]{ cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); return s; }()",
        ),
        "cuda",
        "extra_stream",
    ),
    (
        "stream_from_pool",
        c.RELU_CUDA.replace("at::cuda::getCurrentCUDAStream()", "at::cuda::getStreamFromPool()"),
        "cuda",
        "extra_stream",
    ),
    ("import_threading", prepend("import threading"), "cuda", "threads"),
    ("import_thread_pool", prepend("from concurrent.futures import ThreadPoolExecutor"), "cuda", "threads"),
    (
        "os_system",
        with_forward("        os.system('true')\n        return self.ext.relu_cuda(x)", extra="import os\n"),
        "cuda",
        "threads",
    ),
    ("std_thread", with_cuda("void bg() { std::thread([]{}).detach(); }"), "cuda", "threads"),
    (
        "patch_elapsed_time",
        prepend("import torch\ntorch.cuda.Event.elapsed_time = lambda self, other: 0.001"),
        "cuda",
        "tampering",
    ),
    ("patch_perf_counter", prepend("import time\ntime.perf_counter = lambda: 0.0"), "cuda", "tampering"),
    (
        "setattr_synchronize",
        prepend("import torch\nsetattr(torch.cuda, 'synchronize', lambda *a: None)"),
        "cuda",
        "tampering",
    ),
    ("import_ctypes", prepend("import ctypes"), "cuda", "tampering"),
    ("sys_modules", prepend("import sys\nsys.modules['time'] = None"), "cuda", "tampering"),
    ("environ_write", prepend("import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '0'"), "cuda", "tampering"),
    ("subclasses_escape", prepend("leak = object.__subclasses__()"), "cuda", "tampering"),
    ("exit_early", with_forward("        exit(0)"), "cuda", "tampering"),
    (
        "tensor_subclass",
        prepend("import torch\nclass Lazy(torch.Tensor):\n    pass"),
        "cuda",
        "tensor_subclass",
    ),
    (
        "torch_function_override",
        prepend(
            "class Spy:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return 0"
        ),
        "cuda",
        "tensor_subclass",
    ),
]

FLAGGED: list[tuple[str, str, str, str]] = [
    (
        "cache_on_self",
        with_forward(
            "        key = x.data_ptr()\n        if key not in self.cache:\n"
            "            self.cache[key] = self.ext.relu_cuda(x)\n        return self.cache[key]"
        ).replace("self.ext = relu_ext\n", "self.ext = relu_ext\n        self.cache = {}\n"),
        "cuda",
        "possible_cache",
    ),
    (
        "cache_in_global_list",
        with_forward(
            "        y = self.ext.relu_cuda(x)\n        _SEEN.append(y)\n        return y",
            extra="_SEEN = []\n",
        ),
        "cuda",
        "possible_cache",
    ),
    (
        "matmul_operator",
        with_forward("        return self.ext.relu_cuda(x @ x)"),
        "cuda",
        "torch_ops_in_forward",
    ),
    (
        "nn_module_call",
        with_forward("        return self.ext.relu_cuda(self.lin(x))").replace(
            "self.ext = relu_ext\n", "self.ext = relu_ext\n        self.lin = nn.Linear(4, 4)\n"
        ),
        "cuda",
        "torch_ops_in_forward",
    ),
    (
        "aten_in_extension",
        with_cuda("torch::Tensor ref(torch::Tensor x) { return torch::relu(x); }"),
        "cuda",
        "torch_ops_in_extension",
    ),
    (
        "redefines_model",
        prepend(
            "import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x"
        ),
        "cuda",
        "redefines_model",
    ),
]


@pytest.mark.parametrize(("src", "backend", "check"), [h[1:] for h in HACKS], ids=[h[0] for h in HACKS])
def test_hack_is_rejected_with_its_code(src: str, backend: str, check: str) -> None:
    report = check_source(src, backend)
    assert not report.ok
    codes = {f.check for f in report.rejections}
    assert check in codes, report
    finding = next(f for f in report.rejections if f.check == check)
    assert finding.why.endswith(".") and len(finding.why) > 15


@pytest.mark.parametrize(("src", "backend", "check"), [h[1:] for h in FLAGGED], ids=[h[0] for h in FLAGGED])
def test_suspicious_candidate_is_flagged_not_rejected(src: str, backend: str, check: str) -> None:
    report = check_source(src, backend)
    assert report.rejections == (), report
    assert check in {f.check for f in report.flags}, report


def test_every_check_code_has_a_test() -> None:
    tested = {h[3] for h in HACKS} | {h[3] for h in FLAGGED}
    assert tested == set(REJECTION_CHECKS) | set(FLAG_CHECKS)


# ------------------------------------------------------------------------------------------------
# Details: line numbers, messages, kernel names, the API.


def test_finding_names_the_lines() -> None:
    src = prepend("import threading\nimport threading as t2")
    (finding,) = [f for f in check_source(src, "cuda").rejections if f.check == "threads"]
    assert finding.why == "the source imports threading (lines 1, 2)."


def test_stream_in_cuda_string_reports_the_line_inside_the_source() -> None:
    src = c.RELU_CUDA.replace("at::cuda::getCurrentCUDAStream()", "at::cuda::getStreamFromPool()")
    line = next(i for i, text in enumerate(src.splitlines(), 1) if "getStreamFromPool" in text)
    (finding,) = check_source(src, "cuda").rejections
    assert finding.check == "extra_stream"
    assert f"(line {line})" in finding.why


def test_syntax_error_carries_the_message_and_nothing_else() -> None:
    report = check_source("def forward(:\n", "cuda")
    assert report == StaticReport(rejections=report.rejections, flags=(), kernel_names=())
    (finding,) = report.rejections
    assert finding.check == "syntax_error" and "line 1" in finding.why


def test_commented_out_stream_and_docstrings_are_ignored() -> None:
    src = with_cuda("// an older version used cudaStreamCreate and std::thread here")
    src = src.replace(
        "class ModelNew(nn.Module):\n",
        'class ModelNew(nn.Module):\n    """No std::thread, no cudaStreamCreate."""\n',
    )
    assert check_source(src, "cuda").ok


def test_forward_reaching_the_kernel_through_a_module_alias_counts() -> None:
    src = c.RELU_CUDA.replace("self.ext = relu_ext", "pass") + "\nrelu = relu_ext.relu_cuda\n"
    src = src.replace("return self.ext.relu_cuda(x.contiguous())", "return relu(x)")
    assert check_source(src, "cuda").ok


def test_extension_built_in_init_and_stored_on_self_counts() -> None:
    assert check_source(c.SOFTMAX_CUDA, "cuda").ok
    dropped = c.SOFTMAX_CUDA.replace(
        "return self.softmax_mod.row_softmax(x.contiguous())", "return x.softmax(-1)"
    )
    report = check_source(dropped, "cuda")
    assert {f.check for f in report.rejections} == {"kernel_not_called"}
    assert {f.check for f in report.flags} == {"torch_ops_in_forward"}


def test_backend_decides_what_counts_as_a_kernel() -> None:
    assert {f.check for f in check_source(c.SCALE_CPP, "cuda").rejections} == {"no_custom_kernel"}
    assert {f.check for f in check_source(c.RELU_CUDA, "triton").rejections} == {"no_custom_kernel"}
    assert {f.check for f in check_source(c.TRITON_ADD, "cuda").rejections} == {"no_custom_kernel"}


def test_load_of_a_written_cu_file_counts_when_the_kernel_text_is_in_the_source() -> None:
    src = c.RELU_CUDA.replace(
        'relu_ext = load_inline(\n    name="relu_ext",\n    cpp_sources=relu_cpp_source,\n'
        '    cuda_sources=relu_cuda_source,\n    functions=["relu_cuda"],\n    verbose=False,\n)',
        "import pathlib, tempfile\nfrom torch.utils.cpp_extension import load\n"
        "_dir = pathlib.Path(tempfile.mkdtemp())\n(_dir / 'relu.cu').write_text(relu_cuda_source)\n"
        "relu_ext = load(name='relu_ext', sources=[str(_dir / 'relu.cu')])",
    )
    assert "load(name=" in src
    assert check_source(src, "cuda").ok
    without_kernel = src.replace("__global__ void relu_kernel", "__device__ void relu_kernel")
    assert {f.check for f in check_source(without_kernel, "cuda").rejections} == {"no_custom_kernel"}


@pytest.mark.parametrize(
    ("cuda", "names"),
    [
        ("__global__ void k1(float* x) {}", ["k1"]),
        ("template <typename T>\n__global__ void __launch_bounds__(128) k2(T* x) {}", ["k2"]),
        ('extern "C" __global__ void k3(int n) {}\n__global__ void k3(int n, int m) {}', ["k3"]),
        ("// __global__ void old(float* x) {}\n/* __global__ void older() */ __device__ void d() {}", []),
        ("__global__ static void k4 (float* x) {}\n__global__\nvoid\nk5(float* x) {}", ["k4", "k5"]),
    ],
)
def test_global_kernel_names(cuda: str, names: list[str]) -> None:
    assert global_kernel_names(cuda) == names


def test_unknown_backend_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="backend"):
        check_source(c.RELU_CUDA, "hip")


def test_report_is_frozen_and_ok_follows_rejections() -> None:
    clean = StaticReport(rejections=(), flags=(Finding("redefines_model", "x."),), kernel_names=())
    assert clean.ok
    assert not StaticReport(rejections=(Finding("threads", "x."),), flags=(), kernel_names=()).ok
    with pytest.raises(AttributeError):
        clean.flags = ()  # type: ignore[misc]


# ------------------------------------------------------------------------------------------------
# Source resolution: where honest candidates keep their CUDA text.

KERNEL_TEXT = "__global__ void k(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = 0.f; }"


def built_with(setup: str, cuda_expr: str, forward: str = "return self.ext.k_launch(x)") -> str:
    """A candidate that binds its CUDA text with ``setup`` (8-space indented, in ``__init__``)."""
    return (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
        f"BLOCK = 256\nMODULE_TEXT = {KERNEL_TEXT!r}\n\n"
        "class ModelNew(nn.Module):\n"
        f"    CLASS_TEXT = {KERNEL_TEXT!r}\n\n"
        "    def __init__(self):\n        super().__init__()\n"
        f"{setup}"
        "        self.ext = load_inline(name='k', cpp_sources='void k_launch(torch::Tensor x);',\n"
        f"                               cuda_sources={cuda_expr}, functions=['k_launch'])\n\n"
        f"    def forward(self, x):\n        {forward}\n"
    )


@pytest.mark.parametrize(
    ("setup", "cuda_expr"),
    [
        (f"        src = {KERNEL_TEXT!r}\n", "src"),
        ("        src = '#include <torch/extension.h>\\n'\n        src += MODULE_TEXT\n", "src"),
        ("", "self.CLASS_TEXT"),
        ("", "ModelNew.CLASS_TEXT"),
        ("", "[MODULE_TEXT]"),
        ("", "'\\n'.join(['#define BLOCK 256', MODULE_TEXT])"),
        ("        tmpl = '#define BLOCK {block}\\n' + MODULE_TEXT\n", "tmpl.format(block=BLOCK)"),
        ("", "f'#define BLOCK {BLOCK}\\n{MODULE_TEXT}'"),
        ("", "'#define BLOCK %d\\n' % BLOCK + MODULE_TEXT"),
        (f"        self.text = {KERNEL_TEXT!r}\n", "self.text"),
    ],
    ids=[
        "local",
        "local_augassign",
        "self_class_attr",
        "class_attr",
        "list",
        "join",
        "format",
        "fstring",
        "percent",
        "self_attr",
    ],
)
def test_sources_resolved_from_where_honest_code_keeps_them(setup: str, cuda_expr: str) -> None:
    report = check_source(built_with(setup, cuda_expr), "cuda")
    assert report.rejections == (), report
    assert report.kernel_names == ("k",)


@pytest.mark.parametrize(
    ("setup", "cuda_expr", "why"),
    [
        ("        src = open('k.cu').read()\n", "src", "cannot be resolved"),
        ("", "f'{open(\"k.cu\").read()}'", "are empty"),
        ("", "'\\n'.join(lines)", "cannot be resolved"),
        ("        src = '#include <torch/extension.h>'\n", "src", "define no __global__ kernel"),
    ],
    ids=["file_read", "fstring_of_a_call", "join_of_unknown", "header_only"],
)
def test_unresolvable_or_kernel_free_sources_are_no_custom_kernel(
    setup: str, cuda_expr: str, why: str
) -> None:
    report = check_source(built_with(setup, cuda_expr), "cuda")
    (finding,) = report.rejections
    assert finding.check == "no_custom_kernel" and why in finding.why


@pytest.mark.parametrize(
    ("src", "check"),
    [
        (prepend("code = 'import torch'\nexec(code)"), "tampering"),
        (prepend("m = __import__('ctyp' + 'es')"), "tampering"),
        (prepend("import torch\nvars(torch.cuda)['synchronize'] = print"), "tampering"),
        (prepend("import time\ntime.__dict__['perf_counter'] = lambda: 0.0"), "tampering"),
        (with_cuda('void p() { py::module_::import("torch.cuda").attr("synchronize") = 0; }'), "tampering"),
        (with_cuda('void q() { void* h = dlopen("libx.so", 0); }'), "tampering"),
        (with_cuda('void r() { std::system("true"); }'), "threads"),
        (with_cuda("void s() { if (fork() == 0) { } }"), "threads"),
        (prepend("import torch.nn as nn\nclass P(nn.Parameter):\n    pass"), "tensor_subclass"),
        (prepend("import torch\nfrom torch import multiprocessing"), "threads"),
        (prepend("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True"), "tampering"),
        (prepend("g = globals()"), "tampering"),
        (prepend("import torch\nobject.__setattr__(torch.cuda.Event, 'query', None)"), "tampering"),
        (prepend("from torch.cuda.streams import Stream"), "extra_stream"),
        (with_cuda("void t() { CUstream s; cuStreamCreate(&s, 0); }"), "extra_stream"),
        (
            with_forward(
                "        fut = torch.jit.fork(self.ext.relu_cuda, x)\n        return torch.jit.wait(fut)"
            ),
            "threads",
        ),
        (prepend("import torch\nLazy = type('Lazy', (torch.Tensor,), {})"), "tensor_subclass"),
        (
            with_forward("        y = self.ext.relu_cuda(x)\n        y.__class__ = Spy\n        return y"),
            "tensor_subclass",
        ),
    ],
    ids=[
        "exec",
        "dunder_import",
        "vars_write",
        "dict_write",
        "pybind_attr",
        "dlopen",
        "std_system",
        "fork",
        "parameter_subclass",
        "torch_multiprocessing",
        "tf32_switch",
        "globals",
        "object_setattr",
        "streams_module",
        "driver_stream",
        "jit_fork",
        "type_built_subclass",
        "class_reassigned",
    ],
)
def test_more_hacks(src: str, check: str) -> None:
    assert check in {f.check for f in check_source(src, "cuda").rejections}


def test_pathological_sources_are_rejected_not_raised() -> None:
    deep = "x = " + "-" * 200_000 + "1\n"
    assert [f.check for f in check_source(deep, "cuda").rejections] == ["syntax_error"]
    assert [f.check for f in check_source("x = 1\0\n", "cuda").rejections] == ["syntax_error"]
    long_concat = "SRC = " + " + ".join([repr(KERNEL_TEXT)] + ["'\\n'"] * 150) + "\n"
    src = built_with("", "SRC").replace("BLOCK = 256\n", "BLOCK = 256\n" + long_concat)
    assert check_source(src, "cuda").ok


def test_comment_markers_inside_cpp_string_literals_hide_nothing() -> None:
    src = with_cuda('const char* a = "/*";\nvoid bg() { std::thread([]{}).detach(); }\nconst char* b = "*/";')
    assert "threads" in {f.check for f in check_source(src, "cuda").rejections}
    assert global_kernel_names('const char* s = "//"; __global__ void k(int n) {}') == ["k"]


INHERITED = with_model(
    "class Base(nn.Module):\n    def forward(self, x):\n        return self.ext.relu_cuda(x)\n\n"
    "class ModelNew(Base):\n    def __init__(self):\n        super().__init__()\n        self.ext = relu_ext\n"
)


def test_forward_inherited_from_a_module_class_is_followed() -> None:
    assert check_source(INHERITED, "cuda").ok
    dropped = INHERITED.replace("return self.ext.relu_cuda(x)", "return x.relu()")
    assert {f.check for f in check_source(dropped, "cuda").rejections} == {"kernel_not_called"}
    guarded = INHERITED.replace(
        "        return self.ext.relu_cuda(x)\n",
        "        try:\n            return self.ext.relu_cuda(x)\n        except Exception:\n            return x.relu()\n",
    )
    assert {f.check for f in check_source(guarded, "cuda").rejections} == {"try_except_fallback"}
