"""The rules about ``ModelNew``: that it exists, what it derives from and calls, and what its
``forward`` reaches (``no_model_new``, ``kernel_not_called``, ``try_except_fallback``,
``reference_fallback``; flags ``possible_cache``, ``torch_ops_in_forward``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from distrs.rewards.kernelbench.static_checks.findings import Collector
from distrs.rewards.kernelbench.static_checks.names import SourceNames, dotted, is_self_attr, root_name


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


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


class ModelRules:
    def __init__(self, names: SourceNames, found: Collector, backend: str) -> None:
        self.n = names
        self.found = found
        self.backend = backend

    def model_new(self) -> ast.ClassDef | None:
        seen: set[str] = set()
        name = "ModelNew"
        while name not in seen:
            seen.add(name)
            if name in self.n.classes:
                return self.n.classes[name]
            values = self.n.assigns.get(name)
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
                if isinstance(b, ast.Name) and b.id in self.n.classes and b.id not in seen:
                    seen.add(b.id)
                    stack.append(self.n.classes[b.id])

    def check_model_new(self, cls: ast.ClassDef) -> None:
        for owner, base in self._class_ancestry(cls):
            d = dotted(base) or ""
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
        for node in self.n.nodes:
            if isinstance(node, ast.Try | ast.TryStar) and any(
                self.n.contains_build_call(s) for s in node.body
            ):
                self.found.add(
                    "try_except_fallback", "the extension build is wrapped in try/except", node.lineno
                )
        self._walk_forward(cls)

    def _is_suppress(self, node: ast.With | ast.AsyncWith) -> bool:
        for item in node.items:
            e = item.context_expr
            if isinstance(e, ast.Call):
                d = dotted(e.func)
                if d is not None and self.n.full(d) in {"contextlib.suppress"}:
                    return True
        return False

    def _self_assigns(self, cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
        out: dict[str, list[ast.expr]] = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    a = is_self_attr(t)
                    if a is not None:
                        out.setdefault(a, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                a = is_self_attr(node.target)
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
            if (
                isinstance(base, ast.Name)
                and base.id in self.n.classes
                and self.n.classes[base.id] not in out
            ):
                out.append(self.n.classes[base.id])
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
            if name in (self.n.triton_kernels if triton else self.n.kernel_ref_names):
                uses_kernel = True
            elif name == "Model":
                self.found.add("reference_fallback", "code reached from ModelNew.forward uses Model", line)
            elif name in self.n.functions:
                enqueue(self.n.functions[name], None, True)
            elif name in self.n.classes:
                enqueue_class(self.n.classes[name])
            elif name in self.n.assigns:
                for v in self.n.assigns[name]:
                    enqueue(v, None, False)

        seen.add((id(forward), cls.name))
        while queue:
            node, owner, scan = queue.pop()
            reached_nodes.append((node, owner, scan))
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name in self.n.triton_kernels
            ):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and id(sub) in self.n.build_call_ids and not triton:
                    uses_kernel = True
                if isinstance(sub, ast.Attribute):
                    if (
                        self.n.full(dotted(sub) or "").startswith("torch.ops.")
                        and self.n.build_calls
                        and not triton
                    ):
                        uses_kernel = True
                    attr = is_self_attr(sub)
                    if attr is not None and owner is not None and isinstance(sub.ctx, ast.Load):
                        assigns, ms = cls_info(owner)
                        if attr in ms:
                            enqueue(ms[attr], owner, True)
                        for v in assigns.get(attr, []):
                            if self._is_nn_module_ctor(v):
                                nn_module_attrs.add((owner.name, attr))
                            for n in ast.walk(v):
                                if isinstance(n, ast.Call) and id(n) in self.n.build_call_ids:
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
                if scan and node.name not in self.n.triton_kernels:
                    self._check_torch_compute(node, owner, nn_module_attrs)

    def _is_nn_module_ctor(self, v: ast.expr) -> bool:
        if not isinstance(v, ast.Call):
            return False
        d = dotted(v.func)
        if d is None:
            return False
        full = self.n.full(d)
        if not full.startswith("torch.nn."):
            return False
        rest = full[len("torch.nn.") :]
        return "." not in rest and rest not in _NN_NON_MODULES

    def _check_cache(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Stores that outlive the call. Building the extension lazily (a memoised builder, the
        module kept on ``self`` or in a global) is the usual idiom, not a cache of results."""
        if fn.name == "__init__":
            return
        builds = self.n.contains_build_call(fn)
        for dec in [] if builds else fn.decorator_list:
            d = dotted(dec.func if isinstance(dec, ast.Call) else dec) or ""
            if self.n.full(d) in {"functools.cache", "functools.lru_cache"}:
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
                and self.n.contains_build_call(node.value)
            ):
                continue
            for t in targets:
                line = t.lineno
                if isinstance(t, ast.Subscript):
                    root = root_name(t.value)
                    if root == "self" or (root in self.n.assigns and root not in self.n.imports):
                        self.found.add(
                            "possible_cache",
                            f"{fn.name} stores an item into {dotted(t.value) or root}",
                            line,
                        )
                elif isinstance(t, ast.Attribute) and root_name(t) == "self":
                    self.found.add("possible_cache", f"{fn.name} stores {dotted(t)} on self", line)
                elif isinstance(t, ast.Name) and t.id in global_names:
                    self.found.add("possible_cache", f"{fn.name} rebinds the global {t.id}", line)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _CONTAINER_MUTATORS
            ):
                root = root_name(node.func.value)
                if root == "self" or (
                    root in self.n.assigns
                    and root not in self.n.imports
                    and root not in self.n.kernel_ref_names
                ):
                    self.found.add(
                        "possible_cache",
                        f"{fn.name} calls {node.func.attr} on {dotted(node.func.value) or root}",
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
            d = dotted(func)
            full = self.n.full(d) if d else None
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
                inner = dotted(func.func)
                if inner and self.n.full(inner).startswith("torch.nn.") and self._is_nn_module_ctor(func):
                    self.found.add(
                        "torch_ops_in_forward", f"{where} calls the nn module {inner}", node.lineno
                    )
                continue
            attr = is_self_attr(func)
            if attr is not None and owner is not None and (owner.name, attr) in nn_module_attrs:
                self.found.add(
                    "torch_ops_in_forward", f"{where} calls the nn module self.{attr}", node.lineno
                )
                continue
            if isinstance(func, ast.Attribute) and func.attr in _TENSOR_COMPUTE_METHODS:
                root = root_name(func.value)
                if root is None or (
                    root not in self.n.kernel_ref_names
                    and root not in self.n.imports
                    and root not in self.n.classes
                    and root not in self.n.functions
                    and not (root == "self" and isinstance(func.value, ast.Name))
                    and not self._is_kernel_attr(func.value, owner)
                ):
                    self.found.add(
                        "torch_ops_in_forward", f"{where} calls the tensor method .{func.attr}()", node.lineno
                    )

    def _is_kernel_attr(self, node: ast.expr, owner: ast.ClassDef | None) -> bool:
        """Whether ``node`` is ``self.X`` (or below it) with X bound to the built extension."""
        while isinstance(node, ast.Attribute) and is_self_attr(node) is None:
            node = node.value
        attr = is_self_attr(node)
        if attr is None or owner is None:
            return False
        for v in self._self_assigns(owner).get(attr, []):
            if self.n.contains_build_call(v) or root_name(v) in self.n.kernel_ref_names:
                return True
        return False
