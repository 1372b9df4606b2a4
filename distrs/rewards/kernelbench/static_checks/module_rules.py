"""The rules read in a candidate's Python as a whole: what it imports, calls, reaches and assigns
(``threads``, ``tampering``, ``extra_stream``, ``tensor_subclass``), and a ``Model`` of its own
(``redefines_model``)."""

from __future__ import annotations

import ast

from distrs.rewards.kernelbench.static_checks.findings import Collector
from distrs.rewards.kernelbench.static_checks.names import SourceNames, dotted, root_name

_THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "pty"}
_TAMPER_MODULES = {"ctypes", "gc", "inspect", "importlib", "signal", "atexit", "faulthandler", "builtins"}
_OS_THREAD_CALLS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp"}
_OS_THREAD_PREFIXES = ("spawn", "exec")
_OS_EXIT_CALLS = {"_exit", "abort", "kill", "killpg"}
_HIDING_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals"}
_TORCH_FORK = {"torch.jit.fork", "torch.jit._fork", "torch._C._jit_fork", "torch.futures"}
_TENSOR_BASES = {"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter"}
_TIMING_NAMES = {"elapsed_time", "perf_counter", "synchronize", "record"}
_DUNDER_ESCAPES = {"__subclasses__", "__globals__", "__code__", "__builtins__"}
_ENV_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
_STREAM_ATTRS = {"Stream", "stream", "ExternalStream", "set_stream"}


class ModuleRules:
    def __init__(self, names: SourceNames, found: Collector) -> None:
        self.n = names
        self.found = found

    def check_imports_and_calls(self) -> None:
        for node in self.n.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._check_module_import(a.name, node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module:
                self._check_module_import(node.module, node.lineno)
                for a in node.names:
                    self._check_module_import(f"{node.module}.{a.name}", node.lineno)
            elif isinstance(node, ast.Attribute):
                self._check_attribute(node)
            elif isinstance(node, ast.Name) and node.id == "__builtins__":
                self.found.add("tampering", "the source touches __builtins__", node.lineno)
            elif isinstance(node, ast.Call):
                self._check_call(node)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
                targets = (
                    node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]  # type: ignore[union-attr]
                )
                for t in targets:
                    for sub in ast.walk(t) if isinstance(t, ast.Tuple | ast.List) else [t]:
                        self._check_target(sub, node.lineno)

    def _check_module_import(self, module: str, line: int) -> None:
        top = module.split(".")[0]
        parts = module.split(".")
        if top in _THREAD_MODULES or "multiprocessing" in parts[1:2]:
            self.found.add("threads", f"the source imports {module}", line)
        elif top in _TAMPER_MODULES:
            self.found.add("tampering", f"the source imports {module}", line)
        elif module in {"os.fork", "os.system", "os.popen", "os.forkpty"}:
            self.found.add("threads", f"the source imports {module}", line)
        elif module in {"os._exit", "sys.exit", "sys.modules", "sys._getframe"}:
            self.found.add("tampering", f"the source imports {module}", line)
        elif self._is_stream_api(module):
            self.found.add("extra_stream", f"the source imports {module}", line)
        elif module in _TORCH_FORK:
            self.found.add("threads", f"the source imports {module}", line)

    @staticmethod
    def _is_stream_api(full: str) -> bool:
        """``torch[.cuda[.streams]].Stream``/``ExternalStream``, ``torch.cuda.stream``/``set_stream``."""
        parts = full.split(".")
        if parts[0] != "torch" or len(parts) < 2:
            return False
        if parts[-1] in {"Stream", "ExternalStream"}:
            return True
        return parts[-1] in {"stream", "set_stream"} and "cuda" in parts[1:-1]

    def _check_attribute(self, node: ast.Attribute) -> None:
        full = self.n.full(dotted(node) or "")
        if node.attr in _DUNDER_ESCAPES:
            self.found.add("tampering", f"the source reaches {node.attr}", node.lineno)
        elif full in {"sys.modules", "sys._getframe"}:
            self.found.add("tampering", f"the source uses {full}", node.lineno)
        elif node.attr in {"_make_subclass", "_make_wrapper_subclass"}:
            self.found.add("tensor_subclass", f"the source calls {node.attr}", node.lineno)
        elif node.attr in _STREAM_ATTRS and self._is_stream_api(full):
            self.found.add("extra_stream", f"the source uses {full}", node.lineno)
        elif full in _TORCH_FORK:
            self.found.add("threads", f"the source uses {full}", node.lineno)
        elif node.attr == "__class__" and isinstance(node.ctx, ast.Store):
            self.found.add("tensor_subclass", "the source reassigns an object's __class__", node.lineno)

    def _check_call(self, node: ast.Call) -> None:
        d = dotted(node.func)
        if d is None:
            return
        full = self.n.full(d)
        name = full.split(".")[-1]
        if full.startswith("os.") and full.count(".") == 1:
            if name in _OS_THREAD_CALLS or name.startswith(_OS_THREAD_PREFIXES):
                self.found.add("threads", f"the source calls {full}", node.lineno)
            elif name in _OS_EXIT_CALLS:
                self.found.add("tampering", f"the source calls {full}", node.lineno)
            elif name in {"putenv", "unsetenv"}:
                self.found.add("tampering", f"the source writes the environment with {full}", node.lineno)
        elif full == "sys.exit" or (isinstance(node.func, ast.Name) and d in {"exit", "quit"}):
            self.found.add("tampering", f"the source calls {full}", node.lineno)
        elif isinstance(node.func, ast.Name) and d in _HIDING_CALLS:
            self.found.add("tampering", f"the source calls {d} (code the checks cannot read)", node.lineno)
        elif full.startswith("os.environ.") and name in _ENV_MUTATORS:
            self.found.add("tampering", f"the source writes os.environ with {name}", node.lineno)
        elif d == "type" and len(node.args) == 3:
            if any(
                self.n.full(dotted(b) or "") in _TENSOR_BASES
                for b in (node.args[1].elts if isinstance(node.args[1], ast.Tuple | ast.List) else [])
            ):
                self.found.add(
                    "tensor_subclass", "the source builds a torch.Tensor subclass with type()", node.lineno
                )
        elif (d in {"setattr", "delattr"} or name in {"__setattr__", "__delattr__"}) and node.args:
            obj = node.args[0]
            root = root_name(obj)
            if root is not None and root in self.n.imports:
                self.found.add(
                    "tampering",
                    f"the source calls {d} on {dotted(obj) or root} (an imported module or object)",
                    node.lineno,
                )
            elif (
                len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in _TIMING_NAMES
            ):
                self.found.add(
                    "tampering", f"the source {d}s the attribute {node.args[1].value!r}", node.lineno
                )

    def _check_target(self, t: ast.AST, line: int) -> None:
        if isinstance(t, ast.Name) and t.id in _TIMING_NAMES:
            self.found.add("tampering", f"the source assigns the name {t.id}", line)
        if isinstance(t, ast.Attribute):
            root = root_name(t)
            if t.attr in _TIMING_NAMES:
                self.found.add("tampering", f"the source assigns the attribute {t.attr}", line)
            elif root is not None and root in self.n.imports:
                self.found.add(
                    "tampering",
                    f"the source assigns {dotted(t) or t.attr} (an attribute of an imported module or object)",
                    line,
                )
        if isinstance(t, ast.Subscript) and self._is_namespace_of_import(t.value):
            self.found.add(
                "tampering", "the source writes the namespace of an imported module or object", line
            )
        if isinstance(t, ast.Subscript):
            d = dotted(t.value)
            if d is not None and self.n.full(d) == "os.environ":
                self.found.add("tampering", "the source writes os.environ", line)
            elif d is not None and self.n.full(d) == "sys.modules":
                self.found.add("tampering", "the source writes sys.modules", line)

    def _is_namespace_of_import(self, node: ast.expr) -> bool:
        """``X.__dict__`` or ``vars(X)`` with X an imported module or object."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return root_name(node.value) in self.n.imports
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "vars"
            and node.args
        ):
            return root_name(node.args[0]) in self.n.imports
        return False

    def check_tensor_subclass_and_model(self) -> None:
        for node in self.n.nodes:
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    d = dotted(base)
                    full = self.n.full(d) if d is not None else ""
                    if d is not None and (full in _TENSOR_BASES or d.endswith(".Tensor")):
                        self.found.add("tensor_subclass", f"class {node.name} derives from {d}", node.lineno)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in {
                "__torch_function__",
                "__torch_dispatch__",
            }:
                self.found.add("tensor_subclass", f"the source defines {node.name}", node.lineno)
        for stmt in self.n.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == "Model":
                self.found.add("redefines_model", "the candidate defines its own class Model", stmt.lineno)
            elif isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "Model" for t in stmt.targets
            ):
                self.found.add("redefines_model", "the candidate rebinds the name Model", stmt.lineno)
