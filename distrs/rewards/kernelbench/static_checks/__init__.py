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

The package: ``names.py`` resolves what the candidate's names stand for; the rules are in
``kernel_rules.py`` (a kernel for the backend, the C++/CUDA text), ``module_rules.py`` (imports,
calls and assignments anywhere) and ``model_rules.py`` (``ModelNew`` and what its ``forward``
reaches); ``findings.py`` is the report.
"""

from __future__ import annotations

import ast

from distrs.rewards.kernelbench.static_checks.findings import (
    FLAG_CHECKS,
    REJECTION_CHECKS,
    Collector,
    Finding,
    StaticReport,
)
from distrs.rewards.kernelbench.static_checks.kernel_rules import KernelRules
from distrs.rewards.kernelbench.static_checks.model_rules import ModelRules
from distrs.rewards.kernelbench.static_checks.module_rules import ModuleRules
from distrs.rewards.kernelbench.static_checks.names import SourceNames

BACKENDS = ("cuda", "cpp", "triton")


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
    names, found = SourceNames(tree), Collector()
    kernels = KernelRules(names, found, backend)
    kernels.check_custom_kernel()
    kernels.check_cpp_strings()
    module = ModuleRules(names, found)
    module.check_imports_and_calls()
    module.check_tensor_subclass_and_model()
    model = ModelRules(names, found, backend)
    cls = model.model_new()
    if cls is None:
        if not any(check == "reference_fallback" for check, _ in found.items):
            found.add("no_model_new", "the source defines no class ModelNew", None)
    else:
        model.check_model_new(cls)
    return StaticReport(
        rejections=found.findings(REJECTION_CHECKS),
        flags=found.findings(FLAG_CHECKS),
        kernel_names=tuple(kernels.kernel_names),
    )
