"""The one native part of the package: SIMULATE's serve loops (``distrs/scaling/_serve.c``).

Everything else is declared in pyproject.toml. The extension is optional: without a C compiler
the build still succeeds and ``distrs.scaling.serve_native`` falls back to the Python loops.
It uses only CPython's limited API (3.11), so the wheel is tagged ``cp311-abi3`` and installs on
every CPython from 3.11 on.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "distrs.scaling._serve",
            sources=["distrs/scaling/_serve.c"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
