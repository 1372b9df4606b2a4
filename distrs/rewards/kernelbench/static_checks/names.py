"""Name resolution over a candidate's module: what its names are bound to, read statically.

The rules (the other modules of this package) ask what a name or expression stands for: which
module an imported name is (``imports``), the module's functions and classes, the expressions
assigned to a name in each scope (``bindings``: last binding wins, ``x += e`` followed), which
calls build an extension (``load_inline``/``load``) and which names hold what a build returned
(``kernel_ref_names``), the ``@triton.jit`` functions, and the strings an expression evaluates to
(``resolve_strings``: literals, names in the enclosing functions, class or module, ``self.X`` and
``Cls.X``, ``+``, lists, ``str.join``, ``textwrap.dedent`` and f-string/``.format``/``%``
templates, whose unresolved fields become empty text: that can lose a kernel, never invent one).
Nothing is imported or run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

_BUILD_FUNCS = {"load_inline", "load"}
_CPP_EXTENSION_MODULES = {"torch.utils.cpp_extension"}


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def root_name(node: ast.AST) -> str | None:
    """The name at the bottom of an attribute/subscript/call chain (``a`` of ``a.b[0].c()``)."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def is_self_attr(node: ast.AST) -> str | None:
    """``X`` for ``self.X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def docstring_nodes(nodes: Iterable[ast.AST]) -> set[int]:
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


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_MAX_RESOLVE_DEPTH = 200
_STR_METHODS_KEEPING_TEXT = {"strip", "lstrip", "rstrip", "format", "replace", "expandtabs"}


def bindings(stmts: list[ast.stmt] | list[ast.AST], nested: bool) -> dict[str, list[ast.expr]]:
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


def self_bindings(cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
    """``self.X = e`` in any method of ``cls``: X -> [e, ...] in source order."""
    found: list[tuple[int, int, str, ast.expr]] = []
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                a = is_self_attr(t)
                if a is not None:
                    found.append((n.lineno, n.col_offset, a, n.value))
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            a = is_self_attr(n.target)
            if a is not None:
                found.append((n.lineno, n.col_offset, a, n.value))
    out: dict[str, list[ast.expr]] = {}
    for _, _, name, value in sorted(found, key=lambda f: (f[0], f[1])):
        out.setdefault(name, []).append(value)
    return out


class SourceNames:
    """The names of one module (``tree``), collected when made; see the module docstring."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.nodes: list[ast.AST] = list(ast.walk(tree))  # walked once, read by every rule
        self.docstrings = docstring_nodes(self.nodes)
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
        self._collect()

    def _collect(self) -> None:
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
        self.assigns = bindings(self.tree.body, nested=False)
        # names bound (anywhere, e.g. via ``global``) to a build call's result
        for node in self.nodes:
            if isinstance(node, ast.Call) and self.is_build_call(node):
                self.build_calls.append(node)
                self.build_call_ids.add(id(node))
        for node in self.nodes:
            if (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and node.value is not None
                and self.contains_build_call(node.value)
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
                    root_name(v) in self.kernel_ref_names for v in values
                ):
                    self.kernel_ref_names.add(name)
                    changed = True

    def _collect_stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions[stmt.name] = stmt
            if self.is_triton_jit(stmt):
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

    def full(self, name: str) -> str:
        """``name`` (``a.b``) with its head replaced by what it was imported as."""
        head, _, tail = name.partition(".")
        base = self.imports.get(head, head)
        return f"{base}.{tail}" if tail else base

    def resolves_to(self, node: ast.expr, full: str) -> bool:
        """Whether an expression names ``full`` (e.g. ``torch.utils.cpp_extension.load_inline``)."""
        d = dotted(node)
        if d is None:
            return False
        head, _, tail = d.partition(".")
        base = self.imports.get(head, head)
        return (f"{base}.{tail}" if tail else base) == full

    def is_build_call(self, call: ast.Call) -> bool:
        if any(
            self.resolves_to(call.func, f"{mod}.{fn}")
            for mod in _CPP_EXTENSION_MODULES
            for fn in _BUILD_FUNCS
        ):
            return True
        # ``load_inline`` is unambiguous however it was reached; ``load`` only from a cpp_extension
        d = dotted(call.func) or ""
        return d.split(".")[-1] == "load_inline" or (d.endswith("cpp_extension.load"))

    def contains_build_call(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and id(n) in self.build_call_ids for n in ast.walk(node))

    def is_triton_jit(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            d = dotted(target) or ""
            head, _, tail = d.partition(".")
            base = self.imports.get(head, head)
            full = f"{base}.{tail}" if tail else base
            if full in {"triton.jit", "triton.runtime.jit.jit"} or (
                full.startswith("triton") and full.endswith(".jit")
            ):
                return True
        return False

    def scopes_of(self, target: ast.AST) -> tuple[list[dict[str, list[ast.expr]]], ast.ClassDef | None]:
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
                scopes.append(bindings(node.body, nested=False))
            else:
                scopes.append(bindings([node], nested=True))
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
            values = bindings(cls.body, nested=False).get(node.attr)
            if not values and node.value.id == "self":
                values = self_bindings(cls).get(node.attr)
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
            d = dotted(node.func) or ""
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
    def arg(call: ast.Call, name: str, position: int) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args):
            return call.args[position]
        return None

    def build_kind(self, call: ast.Call) -> str:
        d = self.full(dotted(call.func) or "")
        return "load_inline" if d.split(".")[-1] == "load_inline" else "load"

    def code_strings(self) -> list[tuple[int, str]]:
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
