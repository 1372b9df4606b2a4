"""Which way of running TypeScript gives SandboxFusion's verdicts.

SandboxFusion runs ``language: typescript`` with ``tsx`` (esbuild: types are stripped, never
checked). This runs a corpus of TypeScript programs (SandboxFusion's own runner tests plus
programs that use Node's globals, default imports of Node modules and type errors) four ways and
counts, per way, the programs whose verdict (exit 0 or not) and stdout equal tsx's:

* ``tsx`` - the reference (installed with npm into a temporary directory);
* ``tsc`` as this project ran it before (no Node type definitions);
* ``tsc`` with ``@types/node`` and ``--esModuleInterop`` (npm);
* the compile step of ``distrs/core/languages.yaml`` (TypeScript's ``transpileModule``).

    python benchmarks/typescript_modes.py   # writes benchmarks/results/typescript_modes.{json,md}

Needs node, Debian's node-typescript (``tsc``) and npm with registry access.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distrs.core.languages import language_table  # noqa: E402

CASES: dict[str, tuple[str, str]] = {
    "print": ("console.log(123)", ""),
    "stdin via process.stdin (SandboxFusion)": (
        "process.stdin.on('data', (input: Buffer) => {\n const num: number = parseInt(input.toString());\n"
        " console.log(num);\n process.exit();\n});",
        "65535",
    ),
    "import assert default (SandboxFusion)": (
        "import assert from \"assert\";\nassert.strictEqual(1, 2, '1 !== 2');",
        "",
    ),
    "console.assert(1 === 2) (SandboxFusion)": ("console.assert(1 === 2);", ""),
    "util.promisify default import (SandboxFusion)": (
        "import util from 'util';\nconst sleep = util.promisify(setTimeout);\n"
        "async function main() { await sleep(50); console.log('slept'); }\nmain();",
        "",
    ),
    "require readline": (
        "const readline = require('readline');\nconst rl = readline.createInterface({input: process.stdin});\n"
        "const lines: string[] = [];\nrl.on('line', (l: string) => lines.push(l));\n"
        "rl.on('close', () => console.log(lines.map(Number).reduce((a, b) => a + b, 0)));",
        "1\n2\n3\n",
    ),
    "fs.readFileSync(0)": (
        "import * as fs from 'fs';\nconst s = fs.readFileSync(0, 'utf8');\nconsole.log(s.trim().split(/\\s+/).length);",
        "a b c",
    ),
    "type error: string to number": ("let y: number = 'b';\nconsole.log(y);", ""),
    "type error: unknown property": ("const o = {a: 1};\nconsole.log((o as {a: number}).b);", ""),
    "implicit any parameter": ("function f(a) { return a * 2 }\nconsole.log(f(21));", ""),
    "syntax error": ("console.log(;", ""),
    "runtime throw": ("throw new Error('boom');", ""),
    "generic class + interface": (
        "interface P { x: number }\nclass S<T> { constructor(public v: T) {} }\nconst p: P = {x: 2};\n"
        "console.log(new S(p).v.x);",
        "",
    ),
    "exit code": ("process.exitCode = 3;", ""),
    "Map and bigint": (
        "const m = new Map<string, number>([['a', 1]]);\nconsole.log([...m.keys()].join(','), 2n ** 10n);",
        "",
    ),
}


def run(steps: list[list[str]], code: str, stdin: str, env: dict[str, str]) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "main.ts").write_text(code)
        for argv in steps[:-1]:
            r = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=120, env=env, check=False)
            if r.returncode != 0:
                return "compile_error", ""
        r = subprocess.run(
            steps[-1], cwd=d, input=stdin, capture_output=True, text=True, timeout=30, env=env, check=False
        )
        return ("ok" if r.returncode == 0 else f"exit {r.returncode}"), r.stdout


def main() -> None:
    npm_dir = Path(tempfile.mkdtemp(prefix="ts-modes-"))
    subprocess.run(["npm", "init", "-y"], cwd=npm_dir, capture_output=True, check=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "tsx@4", "@types/node@20"],
        cwd=npm_dir,
        capture_output=True,
        check=True,
    )
    spec = language_table()["typescript"]
    assert spec.compile is not None
    env = {**os.environ, **spec.env}
    modes = {
        "tsx (SandboxFusion)": [[str(npm_dir / "node_modules/.bin/tsx"), "main.ts"]],
        "tsc, no type definitions (before)": [
            ["tsc", "--target", "es2020", "--module", "commonjs", "--outDir", ".", "main.ts"],
            ["node", "main.js"],
        ],
        "tsc + @types/node + esModuleInterop": [
            [
                "tsc",
                "--target",
                "es2020",
                "--module",
                "commonjs",
                "--esModuleInterop",
                "--typeRoots",
                str(npm_dir / "node_modules/@types"),
                "--types",
                "node",
                "--outDir",
                ".",
                "main.ts",
            ],
            ["node", "main.js"],
        ],
        "transpileModule (languages.yaml)": [list(spec.compile), list(spec.run)],
    }
    results = {m: {n: run(steps, *CASES[n], env) for n in CASES} for m, steps in modes.items()}
    ref = results["tsx (SandboxFusion)"]
    rows = []
    for m in modes:
        same = [
            n
            for n in CASES
            if (results[m][n][0] == "ok") == (ref[n][0] == "ok") and results[m][n][1] == ref[n][1]
        ]
        rows.append(
            {"mode": m, "match": len(same), "of": len(CASES), "differ": [n for n in CASES if n not in same]}
        )
    out = ROOT / "benchmarks" / "results"
    (out / "typescript_modes.json").write_text(
        json.dumps({"rows": rows, "results": results}, indent=1) + "\n"
    )
    md = [
        "# TypeScript: which mode gives SandboxFusion's (tsx) verdicts",
        "",
        "| mode | same verdict and stdout as tsx | programs that differ |",
        "|---|---|---|",
    ]
    md += [f"| {r['mode']} | {r['match']}/{r['of']} | {', '.join(r['differ']) or '-'} |" for r in rows]
    (out / "typescript_modes.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
