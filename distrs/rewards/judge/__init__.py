"""Judging programs against test cases: what the judged reward types share.

The judged types (``cpp``, ``python``, ``cuda`` and every language of ``languages.yaml``) compile
a program where they need to, run it once per test case in a sandbox session, compare the outputs
and score the run. This room holds the steps; the types (``cpp.py``, ``python_reward.py``,
``cuda.py``, ``language_handler.py``) put them together:

``settings.py``  ``DISTRS_JUDGE_*``: compilers, interpreters, default limits
``payload.py``   the payload, validated (program, tests, comparison, files)
``limits.py``    each case's limits; what a payload asked for and did not get
``cases.py``     one run per case, each judged, the verdict and the result
``compiler.py``  a compiler run: the binary, or the result that ends the request
``handler.py``   the stage handler skeleton every judged type extends

The names the SandboxFusion drop-in route checks a request with are exported here.
"""

from distrs.rewards.base import InvalidPayload
from distrs.rewards.judge.cases import RAW_OUTPUT_BYTES
from distrs.rewards.judge.payload import check_file_path, check_no_clash

__all__ = ["RAW_OUTPUT_BYTES", "InvalidPayload", "check_file_path", "check_no_clash"]
