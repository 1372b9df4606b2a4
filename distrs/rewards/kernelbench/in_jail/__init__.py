"""The programs of ``kernelbench`` that run inside its jails, and how the host ships them there.

Each is written into a jailed session and run there by the jail's interpreter (``python -I -B``),
where ``distrs`` is not importable: standard library and torch only, and they load each other by
path. The host imports ``callkey`` (the identity of a ``load_inline`` call) and the tests
``tensors`` too.

``import_candidate.py``  imports the candidate as KernelBench does; its ``load_inline`` calls are
                         built by the host (compile stage)
``build_call.py``        builds one ``load_inline`` call in a clean jail, nothing of the candidate
                         in it (compile stage); ``--pch`` precompiles torch's extension header
``nvcc_steps.py``        runs in nvcc's place in a build jail: nvcc's own steps, its device and
                         host chains at once
``judge_process.py``     one KernelBench model (the reference or the candidate) driven step by
                         step by the host (execute stage)
``tensors.py``           the judging processes' tensor work: digests, chunked comparison, the
                         output window
``callkey.py``           the identity of one ``load_inline`` call
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
IMPORT_CANDIDATE = "import_candidate.py"
BUILD_CALL = "build_call.py"
NVCC_STEPS = "nvcc_steps.py"
JUDGE_PROCESS = "judge_process.py"
TENSORS = "tensors.py"
CALLKEY = "callkey.py"


def programs(*names: str) -> dict[str, bytes]:
    """File name -> content of the named programs, to write into a session."""
    return {n: (HERE / n).read_bytes() for n in names}
