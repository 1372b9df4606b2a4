"""The rule that a candidate has a custom kernel for its backend (``no_custom_kernel``), and the
rules read in its C++/CUDA strings (``extra_stream``, ``threads``, ``tampering``,
``torch_ops_in_extension``). Also names the kernels the execute stage looks for."""

from __future__ import annotations

import ast

from distrs.rewards.kernelbench.static_checks.cpp_text import (
    CPP_ATEN_COMPUTE,
    CPP_FUNCTION_BODY,
    CPP_STREAM,
    CPP_TAMPER,
    CPP_THREAD,
    global_kernel_names,
    strip_cpp_comments,
)
from distrs.rewards.kernelbench.static_checks.findings import Collector
from distrs.rewards.kernelbench.static_checks.names import SourceNames


class KernelRules:
    def __init__(self, names: SourceNames, found: Collector, backend: str) -> None:
        self.n = names
        self.found = found
        self.backend = backend
        self.kernel_names: list[str] = []

    def check_custom_kernel(self) -> None:
        module_cuda_text = self.n.code_strings()
        for _, text in module_cuda_text:
            for k in global_kernel_names(text):
                if k not in self.kernel_names:
                    self.kernel_names.append(k)
        if self.backend == "triton":
            for name in self.n.triton_kernels:
                if name not in self.kernel_names:
                    self.kernel_names.append(name)
            if not self.n.triton_kernels:
                self.found.add("no_custom_kernel", "no @triton.jit function is defined", None)
            return
        if not self.n.build_calls:
            self.found.add(
                "no_custom_kernel",
                "no torch.utils.cpp_extension load_inline/load call builds an extension",
                None,
            )
            return
        reasons: list[tuple[str, int]] = []
        for call in self.n.build_calls:
            ok, reason = self._build_has_kernel(call)
            if ok:
                return
            reasons.append((reason, call.lineno))
        for reason, line in reasons:
            self.found.add("no_custom_kernel", reason, line)

    def _build_has_kernel(self, call: ast.Call) -> tuple[bool, str]:
        kind = self.n.build_kind(call)
        scopes, owner = self.n.scopes_of(call)
        if kind == "load_inline":
            cpp = self.n.resolve_strings(self.n.arg(call, "cpp_sources", 1), scopes, owner)
            cuda = self.n.resolve_strings(self.n.arg(call, "cuda_sources", 2), scopes, owner)
            if self.backend == "cuda":
                if self.n.arg(call, "cuda_sources", 2) is None:
                    return False, "load_inline is called without cuda_sources"
                if cuda is None:
                    return False, "the cuda_sources of load_inline cannot be resolved to string constants"
                text = "\n".join(cuda)
                if not text.strip():
                    return False, "the cuda_sources of load_inline are empty"
                if not global_kernel_names(text):
                    return False, "the cuda_sources of load_inline define no __global__ kernel"
                return True, ""
            if self.n.arg(call, "cpp_sources", 1) is None:
                return False, "load_inline is called without cpp_sources"
            if cpp is None:
                return False, "the cpp_sources of load_inline cannot be resolved to string constants"
            text = strip_cpp_comments("\n".join(cpp))
            if not CPP_FUNCTION_BODY.search(text):
                return False, "the cpp_sources of load_inline define no function"
            return True, ""
        # ``load(name, sources)``: paths; the text is whatever the module wrote there
        src_arg = self.n.arg(call, "sources", 1)
        paths = []
        if src_arg is not None:
            for n in ast.walk(src_arg):
                if isinstance(n, ast.Constant) and isinstance(n.value, str):
                    paths.append(n.value)
                elif isinstance(n, ast.Name):
                    paths.extend(self.n.resolve_strings(n, scopes, owner) or [])
        texts = [t for _, t in self.n.code_strings()]
        if self.backend == "cuda":
            if not any(p.endswith((".cu", ".cuh")) for p in paths):
                return False, "load is called without a .cu source file"
            if not any(global_kernel_names(t) for t in texts):
                return False, "load builds a .cu file but no __global__ kernel text is in the source"
            return True, ""
        if not any(p.endswith((".cpp", ".cc", ".cxx")) for p in paths):
            return False, "load is called without a .cpp source file"
        if not any(CPP_FUNCTION_BODY.search(strip_cpp_comments(t)) for t in texts):
            return False, "load builds a .cpp file but no C++ function text is in the source"
        return True, ""

    def check_cpp_strings(self) -> None:
        for line, raw in self.n.code_strings():
            text = strip_cpp_comments(raw)
            for pattern, check, what in (
                (CPP_STREAM, "extra_stream", "the C++/CUDA source uses {} (another stream)"),
                (CPP_THREAD, "threads", "the C++/CUDA source starts work with {}"),
                (CPP_TAMPER, "tampering", "the C++/CUDA source reaches into Python or loads code with {}"),
                (CPP_ATEN_COMPUTE, "torch_ops_in_extension", "the C++/CUDA source calls ATen op {}"),
            ):
                for m in pattern.finditer(text):
                    token = m.group(0).rstrip("( \t\n")
                    self.found.add(check, what.format(token), line + text.count("\n", 0, m.start()))
