"""The C++/CUDA text of a candidate: comments blanked, ``__global__`` kernels named, and the
patterns the rules look for in it."""

from __future__ import annotations

import re

CPP_STREAM = re.compile(
    r"\b(cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|getStreamFromExternal|setCurrentCUDAStream|cudaStreamPerThread)\b"
)
CPP_THREAD = re.compile(
    r"(std::j?thread\b|std::async\b|\bpthread_create\b|"
    r"(?:\bstd::|(?<![\w:.>]))(?:fork|vfork|system|popen|posix_spawnp?|execv[pe]?|execl[pe]?)(?=\s*\())"
)
# C++ that reaches back into the Python interpreter or loads code at run time
CPP_TAMPER = re.compile(
    r"(py::module_?::import\b|\bPyImport_\w+|\bPyObject_SetAttr\w*|\bPyRun_\w+|\bPyEval_\w+|"
    r"\bdlopen\b|\bdlsym\b|\.attr\s*\([^)]*\)\s*=(?!=))"
)
CPP_ATEN_COMPUTE = re.compile(
    r"\b(?:torch|at)::(matmul|mm|bmm|addmm|baddbmm|linear|conv\w*|relu|gelu|sigmoid|tanh|softmax|"
    r"log_softmax|layer_norm|batch_norm|group_norm|einsum|sum|mean|exp|max_pool\w*|avg_pool\w*)\s*\("
)
# C++ string/char literals (kept) or comments (blanked): a "/*" inside a literal opens no comment
_CPP_LITERAL_OR_COMMENT = re.compile(
    r"(\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')|(//[^\n]*|/\*.*?(?:\*/|\Z))", re.DOTALL
)
_GLOBAL = re.compile(r"\b__global__\b")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_KERNEL_NAME = re.compile(r"[\s\w:\*&<>,\"]*?\b([A-Za-z_]\w*)\s*\(")
CPP_FUNCTION_BODY = re.compile(r"\)\s*(?:const\s*)?\{")


def strip_cpp_comments(text: str) -> str:
    """Comments blanked out (string literals respected), newlines kept so offsets give lines."""

    def blank(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) is not None else re.sub(r"[^\n]", " ", m.group(0))

    return _CPP_LITERAL_OR_COMMENT.sub(blank, text)


def global_kernel_names(cuda_text: str) -> list[str]:
    """Names of the ``__global__`` functions defined in a C++/CUDA text, in order, without repeats."""
    text = strip_cpp_comments(cuda_text)
    names: list[str] = []
    for m in _GLOBAL.finditer(text):
        rest = _LAUNCH_BOUNDS.sub(" ", text[m.end() : m.end() + 400])
        k = _KERNEL_NAME.match(rest)
        if k and k.group(1) not in names and k.group(1) not in {"void", "__launch_bounds__"}:
            names.append(k.group(1))
    return names
