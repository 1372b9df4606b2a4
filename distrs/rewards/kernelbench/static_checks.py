"""Static checks on a KernelBench candidate before anything is built or run.

A candidate is a Python module defining ``ModelNew``; for the ``cuda`` backend it builds C++/CUDA
with ``torch.utils.cpp_extension.load_inline`` (or ``load``) when imported, for ``cpp`` it builds a
CPU extension from ``cpp_sources`` only, for ``triton`` it defines ``@triton.jit`` kernels. These
checks read the source (``ast`` for the Python, regexes for the C++/CUDA strings) and never import
it, so they run on the compile stage's CPU workers in milliseconds and reject the known reward
hacks before a 2-4 minute build is spent on them. They are heuristics: a determined candidate can
hide anything from a static reader (``exec`` of a computed string, ``getattr`` with a built name),
and an honest one can trip a rule. The run-time checks of the execute stage (fresh inputs per
trial, the reference run first on clones, device-wide syncs, a profiler listing the kernels that
ran, thread counts) are the real defence; these are the cheap first line.

Rejections (the candidate scores 0 at compile):

* ``syntax_error`` - the Python does not parse; nothing else is checked.
* ``no_model_new`` - no class ``ModelNew`` (or module-level alias of a class) to evaluate.
* ``no_custom_kernel`` - no kernel for the backend: for ``cuda`` no ``load_inline`` call whose
  ``cuda_sources`` resolve to text defining a ``__global__`` function (or a ``load`` of a ``.cu``
  file while the module holds no ``__global__`` text); for ``cpp`` no ``cpp_sources`` that resolve
  to a function body; for ``triton`` no ``@triton.jit`` function. Sources are resolved through
  string literals, names bound in the enclosing functions, class or module (last binding wins,
  ``+=`` followed), ``self.X``/``Cls.X`` class attributes, ``+``, lists/tuples, ``str.join``,
  ``textwrap.dedent`` and f-string/``.format``/``%`` templates (fields that cannot be resolved
  become empty text: that can lose a kernel, never invent one); anything else (file reads, calls)
  is unresolved and a kernel only reachable that way does not count. Defends against the "decoy"
  candidate that lets PyTorch do all the work.
* ``kernel_not_called`` - ``ModelNew.forward`` reaches nothing from the built extension (the
  object ``load_inline`` returned, under any name or ``self`` attribute, a function taken from it,
  ``torch.ops`` for ``is_python_module=False`` builds, or a Triton kernel), following module-level
  helper functions, ``self`` methods and attributes, and classes it uses (``autograd.Function``,
  sub-modules). Limit: a reference on a path never taken at run time still counts.
* ``try_except_fallback`` - ``try``/``except`` (or ``contextlib.suppress``) anywhere in
  ``ModelNew``, in code reached from its ``forward``, or around a build call: the classic
  "fall back to torch when the kernel fails" hack.
* ``reference_fallback`` - ``ModelNew`` derives (directly or through module classes) from
  ``Model``, calls ``super().forward``, or uses ``Model`` in its code or in code its ``forward``
  reaches.
* ``extra_stream`` - ``torch.cuda.Stream``/``stream``/``ExternalStream``/``set_stream`` (also
  ``torch.Stream``, ``torch.cuda.streams.*``) in Python, ``cudaStreamCreate*``, ``cuStreamCreate*``,
  ``getStreamFromPool``, ``getStreamFromExternal``, ``setCurrentCUDAStream``
  or ``cudaStreamPerThread`` in the C++/CUDA strings: work on a stream the timing events do not see.
* ``threads`` - importing ``threading``, ``_thread``, ``multiprocessing`` (also torch's),
  ``concurrent``, ``asyncio``, ``subprocess``, ``pty``; ``os.fork``/``forkpty``/``system``/``popen``/
  ``spawn*``/``exec*``/``posix_spawn*``; ``torch.jit.fork``, ``torch.futures``; ``std::thread``, ``std::jthread``, ``std::async``,
  ``pthread_create``, ``fork``/``system``/``popen``/``exec*`` calls in C++: work that outlives the
  timed call. OpenMP regions join before returning and are allowed.
* ``tampering`` - assigning to, deleting or ``setattr``/``delattr`` on attributes of any imported
  module or name (``torch``, ``time``, ``sys``, ``builtins``, ...); the names ``elapsed_time``,
  ``perf_counter``, ``synchronize``, ``record`` as assignment targets; importing ``ctypes``, ``gc``,
  ``inspect``, ``importlib``, ``signal``, ``atexit``, ``faulthandler``, ``builtins``; ``sys.modules``,
  ``sys._getframe``, ``__subclasses__``, ``__globals__``, ``__code__``, ``__builtins__``;
  ``os._exit``/``abort``/``kill``, ``sys.exit``, ``exit``/``quit`` calls; writes to ``os.environ``
  (also ``putenv``/``unsetenv``); ``exec``/``eval``/``compile``/``__import__``/``globals()``/
  ``locals()`` (code and names these checks cannot read); writes through ``vars(m)``/``m.__dict__``
  or ``object.__setattr__``; C++ that reaches back into Python
  (``py::module_::import``, ``.attr(...) =``, ``PyImport_*``, ``PyObject_SetAttr*``, ``PyRun_*``,
  ``PyEval_*``) or loads code (``dlopen``/``dlsym``). Limits: an honest candidate that sets
  ``TORCH_CUDA_ARCH_LIST`` (the build stage sets it) or ``torch.backends...allow_tf32`` (which
  would change the reference's numerics too) is rejected as well.
* ``tensor_subclass`` - a class deriving from ``torch.Tensor`` or ``nn.Parameter`` (also built with
  ``type(name, bases, ns)``), defining ``__torch_function__`` or ``__torch_dispatch__``,
  ``_make_subclass``/``_make_wrapper_subclass``, or assigning ``__class__``: lazy or lying tensors.

Flags (allowed, reported with the result):

* ``possible_cache`` - code reached from ``forward`` stores into ``self`` attributes or module
  globals (item or attribute assignment, ``append``/``update``/``setdefault``..., ``global``
  rebinding) or is wrapped in ``functools.cache``/``lru_cache``; building the extension lazily
  (a memoised builder, the built module kept on ``self`` or in a global) is not flagged. Caching
  results across calls is only really caught at run time (fresh inputs per trial, correctness
  re-checked after timing).
* ``torch_ops_in_forward`` - PyTorch compute besides the kernel in code reached from ``forward``:
  ``torch.*`` functions other than allocation/shape/dtype helpers, ``torch.nn.functional``,
  calls of ``nn`` modules stored on ``self``, compute methods on tensors (``x.matmul``, ``x.sum``),
  the ``@`` operator. Plain tensor arithmetic (``x + y``) is not seen: types are unknown statically.
* ``torch_ops_in_extension`` - ATen compute (``torch::matmul``, ``at::relu``, ...) called from the
  C++/CUDA strings: the extension may be a wrapper around PyTorch rather than a kernel.
* ``redefines_model`` - the candidate defines its own ``Model``.

``kernel_names`` lists the ``__global__`` functions found in the C++/CUDA strings (and, for the
``triton`` backend, the ``@triton.jit`` functions) so the execute stage can check with a profiler
that at least one of them ran.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

BACKENDS = ("cuda", "cpp", "triton")

REJECTION_CHECKS = (
    "syntax_error",
    "no_model_new",
    "no_custom_kernel",
    "kernel_not_called",
    "try_except_fallback",
    "reference_fallback",
    "extra_stream",
    "threads",
    "tampering",
    "tensor_subclass",
)
FLAG_CHECKS = ("possible_cache", "torch_ops_in_forward", "torch_ops_in_extension", "redefines_model")


@dataclass(frozen=True)
class Finding:
    """One static finding: a stable snake_case ``check`` code and a sentence saying what and where."""

    check: str
    why: str


@dataclass(frozen=True)
class StaticReport:
    """What :func:`check_source` found; ``ok`` when nothing forces a score of 0."""

    rejections: tuple[Finding, ...]
    flags: tuple[Finding, ...]
    kernel_names: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.rejections


# ---------------------------------------------------------------------------------------------
# Vocabularies


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_BUILD_FUNCS = {"load_inline", "load"}
_CPP_EXTENSION_MODULES = {"torch.utils.cpp_extension"}

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

_CONTAINER_MUTATORS = _words(
    """
    append extend insert update setdefault __setitem__ add put appendleft
    """
)

# torch.* callables that allocate, reshape, convert or query: not compute.
_TORCH_ALLOWED = _words(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange tensor
    as_tensor as_strided from_numpy asarray device dtype Size finfo iinfo is_tensor
    is_floating_point numel no_grad inference_mode enable_grad set_grad_enabled get_default_dtype
    manual_seed broadcast_shapes reshape flatten unsqueeze squeeze transpose permute t narrow split
    chunk unbind contiguous
    """
)
# torch sub-namespaces that are not compute (the ops namespace is how kernels are called).
_TORCH_NON_COMPUTE_NS = {"cuda", "utils", "ops", "backends", "jit", "autograd", "testing", "library", "_C"}
# Tensor methods that compute (flagged); anything else (view, size, to, ...) is not.
_TENSOR_COMPUTE_METHODS = _words(
    """
    matmul mm bmm addmm baddbmm mv dot relu relu_ gelu silu sigmoid tanh softmax log_softmax exp log
    sqrt rsqrt pow sum mean var std norm prod cumsum cumprod amax amin argmax argmin logsumexp clamp
    clamp_ clip abs add add_ sub sub_ mul mul_ div div_ addcmul addcdiv lerp where masked_fill topk
    sort einsum conv1d conv2d conv3d
    """
)
_NN_NON_MODULES = {"Parameter", "Buffer", "ParameterList", "ParameterDict", "init", "functional"}

_CPP_STREAM = re.compile(
    r"\b(cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|getStreamFromExternal|setCurrentCUDAStream|cudaStreamPerThread)\b"
)
_CPP_THREAD = re.compile(
    r"(std::j?thread\b|std::async\b|\bpthread_create\b|"
    r"(?:\bstd::|(?<![\w:.>]))(?:fork|vfork|system|popen|posix_spawnp?|execv[pe]?|execl[pe]?)(?=\s*\())"
)
# C++ that reaches back into the Python interpreter or loads code at run time
_CPP_TAMPER = re.compile(
    r"(py::module_?::import\b|\bPyImport_\w+|\bPyObject_SetAttr\w*|\bPyRun_\w+|\bPyEval_\w+|"
    r"\bdlopen\b|\bdlsym\b|\.attr\s*\([^)]*\)\s*=(?!=))"
)
_CPP_ATEN_COMPUTE = re.compile(
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
_CPP_FUNCTION_BODY = re.compile(r"\)\s*(?:const\s*)?\{")


def _strip_cpp_comments(text: str) -> str:
    """Comments blanked out (string literals respected), newlines kept so offsets give lines."""

    def blank(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) is not None else re.sub(r"[^\n]", " ", m.group(0))

    return _CPP_LITERAL_OR_COMMENT.sub(blank, text)


def global_kernel_names(cuda_text: str) -> list[str]:
    """Names of the ``__global__`` functions defined in a C++/CUDA text, in order, without repeats."""
    text = _strip_cpp_comments(cuda_text)
    names: list[str] = []
    for m in _GLOBAL.finditer(text):
        rest = _LAUNCH_BOUNDS.sub(" ", text[m.end() : m.end() + 400])
        k = _KERNEL_NAME.match(rest)
        if k and k.group(1) not in names and k.group(1) not in {"void", "__launch_bounds__"}:
            names.append(k.group(1))
    return names


# ---------------------------------------------------------------------------------------------
# AST helpers


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _root_name(node: ast.AST) -> str | None:
    """The name at the bottom of an attribute/subscript/call chain (``a`` of ``a.b[0].c()``)."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_self_attr(node: ast.AST) -> str | None:
    """``X`` for ``self.X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _lines(nodes: Iterable[int]) -> str:
    ls = sorted(set(nodes))
    return ("line " if len(ls) == 1 else "lines ") + ", ".join(str(n) for n in ls)


def _docstring_nodes(nodes: Iterable[ast.AST]) -> set[int]:
    """ids of the string constants that are docstrings (never scanned as C++)."""
    out: set[int] = set()
    for node in nodes:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.add(id(body[0].value))
    return out


@dataclass
class _Collector:
    """Findings keyed by (check, what) with the lines each was seen on, in first-seen order."""

    items: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def add(self, check: str, what: str, line: int | None) -> None:
        lines = self.items.setdefault((check, what), [])
        if line is not None:
            lines.append(line)

    def findings(self, checks: Iterable[str]) -> tuple[Finding, ...]:
        wanted = set(checks)
        out = []
        for (check, what), lines in self.items.items():
            if check in wanted:
                out.append(Finding(check, f"{what} ({_lines(lines)})." if lines else f"{what}."))
        order = {c: i for i, c in enumerate([*REJECTION_CHECKS, *FLAG_CHECKS])}
        return tuple(sorted(out, key=lambda f: order.get(f.check, len(order))))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_MAX_RESOLVE_DEPTH = 200
_STR_METHODS_KEEPING_TEXT = {"strip", "lstrip", "rstrip", "format", "replace", "expandtabs"}


def _bindings(stmts: list[ast.stmt] | list[ast.AST], nested: bool) -> dict[str, list[ast.expr]]:
    """Name -> the expressions assigned to it in ``stmts``, in source order (``x += e`` becomes
    ``x + e``). With ``nested`` the statements' whole subtrees count (a function's locals), else only
    the statements themselves and those under ``if``/``with``/``try`` (a class or module body)."""
    found: list[tuple[int, int, str, ast.expr]] = []
    nodes: Iterable[ast.AST]
    if nested:
        nodes = (n for s in stmts for n in ast.walk(s))
    else:
        flat: list[ast.AST] = []
        stack: list[ast.AST] = list(reversed(stmts))
        while stack:
            st = stack.pop()
            flat.append(st)
            if isinstance(st, ast.If | ast.With | ast.Try | ast.TryStar):
                children = [*st.body, *getattr(st, "orelse", []), *getattr(st, "finalbody", [])]
                for h in getattr(st, "handlers", []):
                    children.extend(h.body)
                stack.extend(reversed(children))
        nodes = flat
    for n in nodes:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    found.append((n.lineno, n.col_offset, t.id, n.value))
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
            found.append((n.lineno, n.col_offset, n.target.id, n.value))
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            aug = ast.BinOp(left=ast.Name(id=n.target.id, ctx=ast.Load()), op=n.op, right=n.value)
            found.append((n.lineno, n.col_offset, n.target.id, aug))
    out: dict[str, list[ast.expr]] = {}
    for _, _, name, value in sorted(found, key=lambda f: (f[0], f[1])):
        out.setdefault(name, []).append(value)
    return out


def _self_bindings(cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
    """``self.X = e`` in any method of ``cls``: X -> [e, ...] in source order."""
    found: list[tuple[int, int, str, ast.expr]] = []
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                a = _is_self_attr(t)
                if a is not None:
                    found.append((n.lineno, n.col_offset, a, n.value))
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            a = _is_self_attr(n.target)
            if a is not None:
                found.append((n.lineno, n.col_offset, a, n.value))
    out: dict[str, list[ast.expr]] = {}
    for _, _, name, value in sorted(found, key=lambda f: (f[0], f[1])):
        out.setdefault(name, []).append(value)
    return out


# ---------------------------------------------------------------------------------------------
# The analysis


class _Analysis:
    def __init__(self, tree: ast.Module, backend: str) -> None:
        self.tree = tree
        self.backend = backend
        self.found = _Collector()
        self.nodes: list[ast.AST] = list(ast.walk(tree))  # walked once, read by every check
        self.docstrings = _docstring_nodes(self.nodes)
        # import bookkeeping: local name -> dotted module/object it is bound to
        self.imports: dict[str, str] = {}
        # module-level definitions
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.assigns: dict[str, list[ast.expr]] = {}
        self.build_calls: list[ast.Call] = []
        self.build_call_ids: set[int] = set()
        self.kernel_ref_names: set[str] = set()
        self.triton_kernels: dict[str, ast.FunctionDef] = {}
        self.kernel_names: list[str] = []

    # -- bookkeeping ----------------------------------------------------------------------

    def collect(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:  # ``import a.b as x`` binds x to a.b
                        self.imports[a.asname] = a.name
                    else:  # ``import a.b`` binds a
                        top = a.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.imports[a.asname or a.name] = f"{node.module}.{a.name}"
        for stmt in self.tree.body:
            self._collect_stmt(stmt)  # functions and classes
        self.assigns = _bindings(self.tree.body, nested=False)
        # names bound (anywhere, e.g. via ``global``) to a build call's result
        for node in self.nodes:
            if isinstance(node, ast.Call) and self._is_build_call(node):
                self.build_calls.append(node)
                self.build_call_ids.add(id(node))
        for node in self.nodes:
            if (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and node.value is not None
                and self._contains_build_call(node.value)
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in [t, *(t.elts if isinstance(t, ast.Tuple | ast.List) else [])]:
                        if isinstance(n, ast.Name):
                            self.kernel_ref_names.add(n.id)
        # names bound at module level to something taken from a kernel ref (``relu = ext.relu``)
        changed = True
        while changed:
            changed = False
            for name, values in self.assigns.items():
                if name not in self.kernel_ref_names and any(
                    _root_name(v) in self.kernel_ref_names for v in values
                ):
                    self.kernel_ref_names.add(name)
                    changed = True

    def _collect_stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions[stmt.name] = stmt
            if self._is_triton_jit(stmt):
                self.triton_kernels[stmt.name] = stmt  # type: ignore[assignment]
        elif isinstance(stmt, ast.ClassDef):
            self.classes[stmt.name] = stmt
        elif isinstance(stmt, ast.If | ast.With | ast.Try | ast.TryStar):
            # definitions under ``if`` / ``with`` / ``try`` at module level still bind module names
            for sub in ast.iter_child_nodes(stmt):
                if isinstance(sub, ast.stmt):
                    self._collect_stmt(sub)
            if isinstance(stmt, ast.Try | ast.TryStar):
                for h in stmt.handlers:
                    for sub in h.body:
                        self._collect_stmt(sub)

    def _resolves_to(self, node: ast.expr, full: str) -> bool:
        """Whether an expression names ``full`` (e.g. ``torch.utils.cpp_extension.load_inline``)."""
        d = _dotted(node)
        if d is None:
            return False
        head, _, tail = d.partition(".")
        base = self.imports.get(head, head)
        return (f"{base}.{tail}" if tail else base) == full

    def _is_build_call(self, call: ast.Call) -> bool:
        if any(
            self._resolves_to(call.func, f"{mod}.{fn}")
            for mod in _CPP_EXTENSION_MODULES
            for fn in _BUILD_FUNCS
        ):
            return True
        # ``load_inline`` is unambiguous however it was reached; ``load`` only from a cpp_extension
        d = _dotted(call.func) or ""
        return d.split(".")[-1] == "load_inline" or (d.endswith("cpp_extension.load"))

    def _contains_build_call(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and id(n) in self.build_call_ids for n in ast.walk(node))

    def _is_triton_jit(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            d = _dotted(target) or ""
            head, _, tail = d.partition(".")
            base = self.imports.get(head, head)
            full = f"{base}.{tail}" if tail else base
            if full in {"triton.jit", "triton.runtime.jit.jit"} or (
                full.startswith("triton") and full.endswith(".jit")
            ):
                return True
        return False

    # -- resolving source strings -----------------------------------------------------------

    def _scopes_of(self, target: ast.AST) -> tuple[list[dict[str, list[ast.expr]]], ast.ClassDef | None]:
        """The name bindings visible at ``target`` (innermost function first, module last) and the
        class whose ``self`` it sees."""
        chain: list[ast.AST] = []

        def find(node: ast.AST, path: list[ast.AST]) -> bool:
            for child in ast.iter_child_nodes(node):
                if child is target:
                    chain.extend(path)
                    return True
                inner = [*path, child] if isinstance(child, _SCOPES) else path
                if find(child, inner):
                    return True
            return False

        find(self.tree, [])
        scopes: list[dict[str, list[ast.expr]]] = []
        owner: ast.ClassDef | None = None
        for node in reversed(chain):
            if isinstance(node, ast.ClassDef):
                owner = owner or node
                scopes.append(_bindings(node.body, nested=False))
            else:
                scopes.append(_bindings([node], nested=True))
        scopes.append(self.assigns)
        return scopes, owner

    def resolve_strings(
        self,
        node: ast.expr | None,
        scopes: list[dict[str, list[ast.expr]]] | None = None,
        owner: ast.ClassDef | None = None,
        depth: int = 0,
    ) -> list[str] | None:
        """The strings an expression evaluates to, or None when it cannot be resolved statically.

        Interpolated parts of f-strings, ``.format`` and ``%`` templates that cannot be resolved
        become empty: they can only lose text, never invent a kernel."""
        if node is None or depth > _MAX_RESOLVE_DEPTH:
            return None
        scopes = [self.assigns] if scopes is None else scopes

        def sub(n: ast.expr | None) -> list[str] | None:
            return self.resolve_strings(n, scopes, owner, depth + 1)

        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [node.value]
            if isinstance(node.value, int | float) and not isinstance(node.value, bool):
                return [str(node.value)]
            return [] if node.value is None else None
        if isinstance(node, ast.List | ast.Tuple):
            out: list[str] = []
            for elt in node.elts:
                r = sub(elt)
                if r is None:
                    return None
                out.extend(r)
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = sub(node.left), sub(node.right)
            if left is None or right is None:
                return None
            if len(left) == 1 and len(right) == 1:
                return [left[0] + right[0]]
            return [*left, *right]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return sub(node.left)
        if isinstance(node, ast.Name):
            for scope in scopes:
                if scope.get(node.id):
                    return self._resolve_binding(
                        scope, node.id, len(scope[node.id]) - 1, scopes, owner, depth
                    )
            return None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            cls = owner if node.value.id == "self" else self.classes.get(node.value.id)
            if cls is None:
                return None
            values = _bindings(cls.body, nested=False).get(node.attr)
            if not values and node.value.id == "self":
                values = _self_bindings(cls).get(node.attr)
            return sub(values[-1]) if values else None
        if isinstance(node, ast.JoinedStr):
            parts: list[str] = []
            for v in node.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parts.append(v.value)
                elif isinstance(v, ast.FormattedValue):
                    r = sub(v.value)
                    parts.append(r[0] if r is not None and len(r) == 1 else "")
            return ["".join(parts)]
        if isinstance(node, ast.Call):
            d = _dotted(node.func) or ""
            if len(node.args) == 1 and not node.keywords and d.split(".")[-1] in {"dedent", "str"}:
                return sub(node.args[0])
            if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS_KEEPING_TEXT:
                return sub(node.func.value)
            if isinstance(node.func, ast.Attribute) and node.func.attr == "join" and len(node.args) == 1:
                sep, items = sub(node.func.value), sub(node.args[0])
                if sep is None or items is None or len(sep) != 1:
                    return None
                return [sep[0].join(items)]
        return None

    def _resolve_binding(
        self,
        scope: dict[str, list[ast.expr]],
        name: str,
        index: int,
        scopes: list[dict[str, list[ast.expr]]],
        owner: ast.ClassDef | None,
        depth: int,
    ) -> list[str] | None:
        """The ``index``-th binding of ``name``; ``x += ...`` refers back to the one before."""
        if depth > _MAX_RESOLVE_DEPTH:
            return None
        value = scope[name][index]
        if isinstance(value, ast.BinOp) and isinstance(value.left, ast.Name) and value.left.id == name:
            if index == 0:
                return None
            left = self._resolve_binding(scope, name, index - 1, scopes, owner, depth + 1)
            right = self.resolve_strings(value.right, scopes, owner, depth + 1)
            if left is None or right is None:
                return None
            if len(left) == 1 and len(right) == 1:
                return [left[0] + right[0]]
            return [*left, *right]
        return self.resolve_strings(value, scopes, owner, depth + 1)

    @staticmethod
    def _arg(call: ast.Call, name: str, position: int) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args):
            return call.args[position]
        return None

    def _build_kind(self, call: ast.Call) -> str:
        d = self._full(_dotted(call.func) or "")
        return "load_inline" if d.split(".")[-1] == "load_inline" else "load"

    # -- the checks ----------------------------------------------------------------------------

    def check_custom_kernel(self) -> None:
        module_cuda_text = self._all_code_strings()
        for _, text in module_cuda_text:
            for k in global_kernel_names(text):
                if k not in self.kernel_names:
                    self.kernel_names.append(k)
        if self.backend == "triton":
            for name in self.triton_kernels:
                if name not in self.kernel_names:
                    self.kernel_names.append(name)
            if not self.triton_kernels:
                self.found.add("no_custom_kernel", "no @triton.jit function is defined", None)
            return
        if not self.build_calls:
            self.found.add(
                "no_custom_kernel",
                "no torch.utils.cpp_extension load_inline/load call builds an extension",
                None,
            )
            return
        reasons: list[tuple[str, int]] = []
        for call in self.build_calls:
            ok, reason = self._build_has_kernel(call)
            if ok:
                return
            reasons.append((reason, call.lineno))
        for reason, line in reasons:
            self.found.add("no_custom_kernel", reason, line)

    def _build_has_kernel(self, call: ast.Call) -> tuple[bool, str]:
        kind = self._build_kind(call)
        scopes, owner = self._scopes_of(call)
        if kind == "load_inline":
            cpp = self.resolve_strings(self._arg(call, "cpp_sources", 1), scopes, owner)
            cuda = self.resolve_strings(self._arg(call, "cuda_sources", 2), scopes, owner)
            if self.backend == "cuda":
                if self._arg(call, "cuda_sources", 2) is None:
                    return False, "load_inline is called without cuda_sources"
                if cuda is None:
                    return False, "the cuda_sources of load_inline cannot be resolved to string constants"
                text = "\n".join(cuda)
                if not text.strip():
                    return False, "the cuda_sources of load_inline are empty"
                if not global_kernel_names(text):
                    return False, "the cuda_sources of load_inline define no __global__ kernel"
                return True, ""
            if self._arg(call, "cpp_sources", 1) is None:
                return False, "load_inline is called without cpp_sources"
            if cpp is None:
                return False, "the cpp_sources of load_inline cannot be resolved to string constants"
            text = _strip_cpp_comments("\n".join(cpp))
            if not _CPP_FUNCTION_BODY.search(text):
                return False, "the cpp_sources of load_inline define no function"
            return True, ""
        # ``load(name, sources)``: paths; the text is whatever the module wrote there
        src_arg = self._arg(call, "sources", 1)
        paths = []
        if src_arg is not None:
            for n in ast.walk(src_arg):
                if isinstance(n, ast.Constant) and isinstance(n.value, str):
                    paths.append(n.value)
                elif isinstance(n, ast.Name):
                    paths.extend(self.resolve_strings(n, scopes, owner) or [])
        texts = [t for _, t in self._all_code_strings()]
        if self.backend == "cuda":
            if not any(p.endswith((".cu", ".cuh")) for p in paths):
                return False, "load is called without a .cu source file"
            if not any(global_kernel_names(t) for t in texts):
                return False, "load builds a .cu file but no __global__ kernel text is in the source"
            return True, ""
        if not any(p.endswith((".cpp", ".cc", ".cxx")) for p in paths):
            return False, "load is called without a .cpp source file"
        if not any(_CPP_FUNCTION_BODY.search(_strip_cpp_comments(t)) for t in texts):
            return False, "load builds a .cpp file but no C++ function text is in the source"
        return True, ""

    def _all_code_strings(self) -> list[tuple[int, str]]:
        """(line, text) of every string constant that is not a docstring."""
        out = []
        for node in self.nodes:
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in self.docstrings
                and ("\n" in node.value or "(" in node.value or "::" in node.value)
            ):
                out.append((node.lineno, node.value))
        return out

    def check_cpp_strings(self) -> None:
        for line, raw in self._all_code_strings():
            text = _strip_cpp_comments(raw)
            for pattern, check, what in (
                (_CPP_STREAM, "extra_stream", "the C++/CUDA source uses {} (another stream)"),
                (_CPP_THREAD, "threads", "the C++/CUDA source starts work with {}"),
                (_CPP_TAMPER, "tampering", "the C++/CUDA source reaches into Python or loads code with {}"),
                (_CPP_ATEN_COMPUTE, "torch_ops_in_extension", "the C++/CUDA source calls ATen op {}"),
            ):
                for m in pattern.finditer(text):
                    token = m.group(0).rstrip("( \t\n")
                    self.found.add(check, what.format(token), line + text.count("\n", 0, m.start()))

    def check_imports_and_calls(self) -> None:
        for node in self.nodes:
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

    def _full(self, dotted: str) -> str:
        head, _, tail = dotted.partition(".")
        base = self.imports.get(head, head)
        return f"{base}.{tail}" if tail else base

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
        full = self._full(_dotted(node) or "")
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
        d = _dotted(node.func)
        if d is None:
            return
        full = self._full(d)
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
                self._full(_dotted(b) or "") in _TENSOR_BASES
                for b in (node.args[1].elts if isinstance(node.args[1], ast.Tuple | ast.List) else [])
            ):
                self.found.add(
                    "tensor_subclass", "the source builds a torch.Tensor subclass with type()", node.lineno
                )
        elif (d in {"setattr", "delattr"} or name in {"__setattr__", "__delattr__"}) and node.args:
            obj = node.args[0]
            root = _root_name(obj)
            if root is not None and root in self.imports:
                self.found.add(
                    "tampering",
                    f"the source calls {d} on {_dotted(obj) or root} (an imported module or object)",
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
            root = _root_name(t)
            if t.attr in _TIMING_NAMES:
                self.found.add("tampering", f"the source assigns the attribute {t.attr}", line)
            elif root is not None and root in self.imports:
                self.found.add(
                    "tampering",
                    f"the source assigns {_dotted(t) or t.attr} (an attribute of an imported module or object)",
                    line,
                )
        if isinstance(t, ast.Subscript) and self._is_namespace_of_import(t.value):
            self.found.add(
                "tampering", "the source writes the namespace of an imported module or object", line
            )
        if isinstance(t, ast.Subscript):
            d = _dotted(t.value)
            if d is not None and self._full(d) == "os.environ":
                self.found.add("tampering", "the source writes os.environ", line)
            elif d is not None and self._full(d) == "sys.modules":
                self.found.add("tampering", "the source writes sys.modules", line)

    def _is_namespace_of_import(self, node: ast.expr) -> bool:
        """``X.__dict__`` or ``vars(X)`` with X an imported module or object."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return _root_name(node.value) in self.imports
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "vars"
            and node.args
        ):
            return _root_name(node.args[0]) in self.imports
        return False

    def check_tensor_subclass_and_model(self) -> None:
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    d = _dotted(base)
                    full = self._full(d) if d is not None else ""
                    if d is not None and (full in _TENSOR_BASES or d.endswith(".Tensor")):
                        self.found.add("tensor_subclass", f"class {node.name} derives from {d}", node.lineno)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in {
                "__torch_function__",
                "__torch_dispatch__",
            }:
                self.found.add("tensor_subclass", f"the source defines {node.name}", node.lineno)
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == "Model":
                self.found.add("redefines_model", "the candidate defines its own class Model", stmt.lineno)
            elif isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "Model" for t in stmt.targets
            ):
                self.found.add("redefines_model", "the candidate rebinds the name Model", stmt.lineno)

    # -- ModelNew ---------------------------------------------------------------------------------

    def model_new(self) -> ast.ClassDef | None:
        seen: set[str] = set()
        name = "ModelNew"
        while name not in seen:
            seen.add(name)
            if name in self.classes:
                return self.classes[name]
            values = self.assigns.get(name)
            if not values:
                return None
            last = values[-1]
            if isinstance(last, ast.Name):
                if last.id == "Model":
                    self.found.add(
                        "reference_fallback", "ModelNew is bound to the reference Model", last.lineno
                    )
                    return None
                name = last.id
            else:
                return None
        return None

    def _class_ancestry(self, cls: ast.ClassDef) -> Iterator[tuple[ast.ClassDef, ast.expr]]:
        stack, seen = [cls], {cls.name}
        while stack:
            c = stack.pop()
            for b in c.bases:
                yield c, b
                if isinstance(b, ast.Name) and b.id in self.classes and b.id not in seen:
                    seen.add(b.id)
                    stack.append(self.classes[b.id])

    def check_model_new(self, cls: ast.ClassDef) -> None:
        for owner, base in self._class_ancestry(cls):
            d = _dotted(base) or ""
            if d == "Model" or d.endswith(".Model"):
                via = "" if owner is cls else f" through {owner.name}"
                self.found.add("reference_fallback", f"ModelNew derives from Model{via}", owner.lineno)
        for node in ast.walk(cls):
            if isinstance(node, ast.Try | ast.TryStar):
                self.found.add("try_except_fallback", "ModelNew contains a try/except", node.lineno)
            elif isinstance(node, ast.With | ast.AsyncWith) and self._is_suppress(node):
                self.found.add("try_except_fallback", "ModelNew suppresses exceptions", node.lineno)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "forward"
                and isinstance(node.func.value, ast.Call)
                and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "super"
            ):
                self.found.add("reference_fallback", "ModelNew calls super().forward", node.lineno)
        # try/except around a build call at module level
        for node in self.nodes:
            if isinstance(node, ast.Try | ast.TryStar) and any(
                self._contains_build_call(s) for s in node.body
            ):
                self.found.add(
                    "try_except_fallback", "the extension build is wrapped in try/except", node.lineno
                )
        self._walk_forward(cls)

    def _is_suppress(self, node: ast.With | ast.AsyncWith) -> bool:
        for item in node.items:
            e = item.context_expr
            if isinstance(e, ast.Call):
                d = _dotted(e.func)
                if d is not None and self._full(d) in {"contextlib.suppress"}:
                    return True
        return False

    def _self_assigns(self, cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
        out: dict[str, list[ast.expr]] = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    a = _is_self_attr(t)
                    if a is not None:
                        out.setdefault(a, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                a = _is_self_attr(node.target)
                if a is not None:
                    out.setdefault(a, []).append(node.value)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "setattr"
                and len(node.args) >= 3
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "self"
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                out.setdefault(node.args[1].value, []).append(node.args[2])
        return out

    def _lineage(self, cls: ast.ClassDef) -> list[ast.ClassDef]:
        """``cls`` and its module-level ancestors, nearest first."""
        out = [cls]
        for _, base in self._class_ancestry(cls):
            if isinstance(base, ast.Name) and base.id in self.classes and self.classes[base.id] not in out:
                out.append(self.classes[base.id])
        return out

    def _walk_forward(self, cls: ast.ClassDef) -> None:
        self_maps: dict[str, dict[str, list[ast.expr]]] = {}
        class_methods: dict[str, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}

        def cls_info(
            c: ast.ClassDef,
        ) -> tuple[dict[str, list[ast.expr]], dict[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
            """``self`` attributes and methods of ``c``, inherited ones from module classes included."""
            if c.name not in self_maps:
                assigns: dict[str, list[ast.expr]] = {}
                methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
                for k in self._lineage(c):
                    for attr, values in self._self_assigns(k).items():
                        assigns.setdefault(attr, []).extend(values)
                    for st in k.body:
                        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
                            methods.setdefault(st.name, st)
                self_maps[c.name], class_methods[c.name] = assigns, methods
            return self_maps[c.name], class_methods[c.name]

        forward = cls_info(cls)[1].get("forward")
        if forward is None:
            self.found.add("kernel_not_called", "ModelNew defines no forward method", cls.lineno)
            return
        in_cls = {id(n) for n in ast.walk(cls)}  # try/except here was reported by the class-wide walk

        uses_kernel = False
        triton = self.backend == "triton"
        nn_module_attrs: set[tuple[str, str]] = set()
        seen: set[tuple[int, str | None]] = set()
        # (node to walk, class whose ``self`` it sees, whether to scan it for torch compute)
        queue: list[tuple[ast.AST, ast.ClassDef | None, bool]] = [(forward, cls, True)]
        reached_nodes: list[tuple[ast.AST, ast.ClassDef | None, bool]] = []

        def enqueue(node: ast.AST, owner: ast.ClassDef | None, scan: bool) -> None:
            key = (id(node), owner.name if owner else None)
            if key not in seen:
                seen.add(key)
                queue.append((node, owner, scan))

        def enqueue_class(c: ast.ClassDef) -> None:
            _, ms = cls_info(c)
            for mname, m in ms.items():
                enqueue(m, c, mname != "__init__")

        def enqueue_name(name: str, line: int) -> None:
            nonlocal uses_kernel
            if name in (self.triton_kernels if triton else self.kernel_ref_names):
                uses_kernel = True
            elif name == "Model":
                self.found.add("reference_fallback", "code reached from ModelNew.forward uses Model", line)
            elif name in self.functions:
                enqueue(self.functions[name], None, True)
            elif name in self.classes:
                enqueue_class(self.classes[name])
            elif name in self.assigns:
                for v in self.assigns[name]:
                    enqueue(v, None, False)

        seen.add((id(forward), cls.name))
        while queue:
            node, owner, scan = queue.pop()
            reached_nodes.append((node, owner, scan))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in self.triton_kernels:
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and id(sub) in self.build_call_ids and not triton:
                    uses_kernel = True
                if isinstance(sub, ast.Attribute):
                    if (
                        self._full(_dotted(sub) or "").startswith("torch.ops.")
                        and self.build_calls
                        and not triton
                    ):
                        uses_kernel = True
                    attr = _is_self_attr(sub)
                    if attr is not None and owner is not None and isinstance(sub.ctx, ast.Load):
                        assigns, ms = cls_info(owner)
                        if attr in ms:
                            enqueue(ms[attr], owner, True)
                        for v in assigns.get(attr, []):
                            if self._is_nn_module_ctor(v):
                                nn_module_attrs.add((owner.name, attr))
                            for n in ast.walk(v):
                                if isinstance(n, ast.Call) and id(n) in self.build_call_ids:
                                    uses_kernel = uses_kernel or not triton
                                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                                    enqueue_name(n.id, n.lineno)
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                    enqueue_name(sub.id, sub.lineno)
                elif isinstance(sub, ast.Try | ast.TryStar) and id(sub) not in in_cls:
                    self.found.add(
                        "try_except_fallback",
                        "code reached from ModelNew.forward has a try/except",
                        sub.lineno,
                    )
                elif (
                    isinstance(sub, ast.With | ast.AsyncWith)
                    and id(sub) not in in_cls
                    and self._is_suppress(sub)
                ):
                    self.found.add(
                        "try_except_fallback",
                        "code reached from ModelNew.forward suppresses exceptions",
                        sub.lineno,
                    )
        no_kernel = any(check == "no_custom_kernel" for check, _ in self.found.items)
        if not uses_kernel and not no_kernel:
            what = "the Triton kernels" if self.backend == "triton" else "the built extension"
            self.found.add(
                "kernel_not_called",
                f"ModelNew.forward (line {forward.lineno}) reaches nothing from {what}",
                None,
            )
        for node, owner, scan in reached_nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._check_cache(node)
                if scan and node.name not in self.triton_kernels:
                    self._check_torch_compute(node, owner, nn_module_attrs)

    def _is_nn_module_ctor(self, v: ast.expr) -> bool:
        if not isinstance(v, ast.Call):
            return False
        d = _dotted(v.func)
        if d is None:
            return False
        full = self._full(d)
        if not full.startswith("torch.nn."):
            return False
        rest = full[len("torch.nn.") :]
        return "." not in rest and rest not in _NN_NON_MODULES

    def _check_cache(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Stores that outlive the call. Building the extension lazily (a memoised builder, the
        module kept on ``self`` or in a global) is the usual idiom, not a cache of results."""
        if fn.name == "__init__":
            return
        builds = self._contains_build_call(fn)
        for dec in [] if builds else fn.decorator_list:
            d = _dotted(dec.func if isinstance(dec, ast.Call) else dec) or ""
            if self._full(d) in {"functools.cache", "functools.lru_cache"}:
                self.found.add("possible_cache", f"{fn.name} is memoised with {d}", fn.lineno)
        global_names: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                global_names.update(node.names)
        for node in ast.walk(fn):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            if (
                isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
                and node.value is not None
                and self._contains_build_call(node.value)
            ):
                continue
            for t in targets:
                line = t.lineno
                if isinstance(t, ast.Subscript):
                    root = _root_name(t.value)
                    if root == "self" or (root in self.assigns and root not in self.imports):
                        self.found.add(
                            "possible_cache",
                            f"{fn.name} stores an item into {_dotted(t.value) or root}",
                            line,
                        )
                elif isinstance(t, ast.Attribute) and _root_name(t) == "self":
                    self.found.add("possible_cache", f"{fn.name} stores {_dotted(t)} on self", line)
                elif isinstance(t, ast.Name) and t.id in global_names:
                    self.found.add("possible_cache", f"{fn.name} rebinds the global {t.id}", line)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _CONTAINER_MUTATORS
            ):
                root = _root_name(node.func.value)
                if root == "self" or (
                    root in self.assigns and root not in self.imports and root not in self.kernel_ref_names
                ):
                    self.found.add(
                        "possible_cache",
                        f"{fn.name} calls {node.func.attr} on {_dotted(node.func.value) or root}",
                        node.lineno,
                    )

    def _check_torch_compute(
        self,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        owner: ast.ClassDef | None,
        nn_module_attrs: set[tuple[str, str]],
    ) -> None:
        where = f"{owner.name}.{fn.name}" if owner else fn.name
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                self.found.add("torch_ops_in_forward", f"{where} uses the @ operator", node.lineno)
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            d = _dotted(func)
            full = self._full(d) if d else None
            if full is not None and full.startswith("torch."):
                parts = full.split(".")
                if full.startswith("torch.nn.functional."):
                    self.found.add("torch_ops_in_forward", f"{where} calls {d}", node.lineno)
                elif parts[1] == "nn" and len(parts) == 3 and parts[2] not in _NN_NON_MODULES:
                    # an nn module built and called inline: nn.ReLU()(x) counts at the outer call
                    continue
                elif (len(parts) == 2 and parts[1] not in _TORCH_ALLOWED) or (
                    len(parts) > 2 and parts[1] not in _TORCH_NON_COMPUTE_NS and parts[1] != "nn"
                ):
                    self.found.add("torch_ops_in_forward", f"{where} calls {d}", node.lineno)
                continue
            if isinstance(func, ast.Call):
                inner = _dotted(func.func)
                if inner and self._full(inner).startswith("torch.nn.") and self._is_nn_module_ctor(func):
                    self.found.add(
                        "torch_ops_in_forward", f"{where} calls the nn module {inner}", node.lineno
                    )
                continue
            attr = _is_self_attr(func)
            if attr is not None and owner is not None and (owner.name, attr) in nn_module_attrs:
                self.found.add(
                    "torch_ops_in_forward", f"{where} calls the nn module self.{attr}", node.lineno
                )
                continue
            if isinstance(func, ast.Attribute) and func.attr in _TENSOR_COMPUTE_METHODS:
                root = _root_name(func.value)
                if root is None or (
                    root not in self.kernel_ref_names
                    and root not in self.imports
                    and root not in self.classes
                    and root not in self.functions
                    and not (root == "self" and isinstance(func.value, ast.Name))
                    and not self._is_kernel_attr(func.value, owner)
                ):
                    self.found.add(
                        "torch_ops_in_forward", f"{where} calls the tensor method .{func.attr}()", node.lineno
                    )

    def _is_kernel_attr(self, node: ast.expr, owner: ast.ClassDef | None) -> bool:
        """Whether ``node`` is ``self.X`` (or below it) with X bound to the built extension."""
        while isinstance(node, ast.Attribute) and _is_self_attr(node) is None:
            node = node.value
        attr = _is_self_attr(node)
        if attr is None or owner is None:
            return False
        for v in self._self_assigns(owner).get(attr, []):
            if self._contains_build_call(v) or _root_name(v) in self.kernel_ref_names:
                return True
        return False


def check_source(src: str, backend: str) -> StaticReport:
    """Statically check a KernelBench candidate's source for ``backend`` (cuda, cpp or triton)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        where = f" (line {e.lineno})" if e.lineno else ""
        return _unreadable(f"the Python does not parse: {e.msg}{where}.")
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes; absurd nesting
        detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return _unreadable(f"the Python does not parse ({detail}).")
    try:
        return _analyse(tree, backend)
    except RecursionError:
        return _unreadable("the Python is nested too deeply to check.")


def _unreadable(why: str) -> StaticReport:
    return StaticReport(rejections=(Finding("syntax_error", why),), flags=(), kernel_names=())


def _analyse(tree: ast.Module, backend: str) -> StaticReport:
    a = _Analysis(tree, backend)
    a.collect()
    a.check_custom_kernel()
    a.check_cpp_strings()
    a.check_imports_and_calls()
    a.check_tensor_subclass_and_model()
    cls = a.model_new()
    if cls is None:
        if not any(check == "reference_fallback" for check, _ in a.found.items):
            a.found.add("no_model_new", "the source defines no class ModelNew", None)
    else:
        a.check_model_new(cls)
    return StaticReport(
        rejections=a.found.findings(REJECTION_CHECKS),
        flags=a.found.findings(FLAG_CHECKS),
        kernel_names=tuple(a.kernel_names),
    )
