"""The compiled P4 artifacts under p4src/build/: compile them, and check that they match the sources.

Every program's build directory holds its compiler's outputs and `sources.json`, a manifest of the SHA-256 of every P4
source they were compiled from. The BMv2 programs of p4src/programs.txt give `bmv2.json` and `p4info.txtpb`
(p4c-bm2-ss); the Tofino program (`tng_tna`, p4src/tna/tng.p4) gives `p4info.txtpb` (p4c-barefoot; its backend is
skipped until the program fits Tofino 1's stages, and its BF-RT schema is not kept: p4c-barefoot orders the schema's
snapshot tables differently from run to run, docs/tofino.md). Two checks read the manifests:

- `check-sources` needs no toolchain: it fails when a P4 source changed (or appeared, or went) since the committed
  artifacts were compiled, so even a machine without p4c notices stale artifacts;
- `check-compile` compiles afresh with each compiler that is here and fails when the output differs from what is
  committed; a target whose compiler is absent is skipped with its reason.

Exit status: 0 good, 1 a mismatch (each named on its own line), 3 skipped (the reason on the last line).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tng_p4 import pipeline, tna, toolchain

MANIFEST = "sources.json"
SOURCE_ROOT = Path("p4src")
# The Tofino compile writes the P4Info only, with P4Runtime's standard counter and digest messages (what the controller
# reads on either target). Its backend (context.json, the binary, resources) is skipped (--skip-compilation of the
# pipe named pipe) while the program needs more than Tofino 1's 12 stages (docs/tofino.md).
TNA_FLAGS = ("--target", "tofino", "--arch", "tna", "--p4runtime-force-std-externs", "--skip-compilation", "pipe")


class CompileError(RuntimeError):
    """p4c failed; the message holds its output."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    program: str
    problem: str

    def line(self) -> str:
        return f"{self.program}: {self.problem}"


def source_digests(root: Path) -> dict[str, str]:
    """SHA-256 of every P4 source under p4src/ (outside p4src/build/), by path relative to the repository.

    Every program's manifest lists all of them: an include graph would be p4c's to know, and a change anywhere simply
    asks for `make p4`, which compiles every program anyway."""
    sources = sorted(
        path for path in (root / SOURCE_ROOT).rglob("*.p4") if pipeline.BUILD_DIR not in path.relative_to(root).parents
    )
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() for path in sources}


def compile_program(p4c_bm2_ss: Path, source: Path, out_dir: Path, root: Path) -> None:
    """Compiles `source` for BMv2 into `out_dir` (bmv2.json, p4info.txtpb) and writes its source manifest.

    p4c runs from the repository root on relative paths: the JSON records source paths, and relative ones keep it the
    same on every machine."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = _relative(out_dir.resolve(), root.resolve())
    command = [
        str(p4c_bm2_ss),
        "--arch",
        "v1model",
        "-I",
        str(SOURCE_ROOT),
        "--p4runtime-files",
        str(out / "p4info.txtpb"),
        "-o",
        str(out / "bmv2.json"),
        str(_relative(source.resolve(), root.resolve())),
    ]
    _run_compiler(command, root)
    _write_manifest(out_dir, "v1model", source, root)


def compile_tna_program(p4c_barefoot: Path, source: Path, out_dir: Path, root: Path) -> None:
    """Compiles `source` for Tofino (TNA) into `out_dir` (p4info.txtpb) and writes its source manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out = _relative(out_dir.resolve(), root.resolve())
    with tempfile.TemporaryDirectory(prefix="tng-tna-") as backend_out:  # what the skipped backend leaves
        command = [
            str(p4c_barefoot),
            *TNA_FLAGS,
            "-I",
            str(SOURCE_ROOT),
            "--p4runtime-files",
            str(out / "p4info.txtpb"),
            "-o",
            backend_out,
            str(_relative(source.resolve(), root.resolve())),
        ]
        _run_compiler(command, root)
    _write_manifest(out_dir, "tna", source, root)


def _run_compiler(command: list[str], root: Path) -> None:
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0:
        raise CompileError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}".rstrip())


def _write_manifest(out_dir: Path, arch: str, source: Path, root: Path) -> None:
    manifest = {"arch": arch, "program": str(source.relative_to(root)), "sources": source_digests(root)}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True, slots=True)
class Target:
    """How one target's programs are compiled: the toolchain purpose that finds the compiler, the compiler as a
    function (compiler, source, out_dir, root), and the files it writes besides the manifest."""

    name: str
    purpose: toolchain.Purpose
    compile: Callable[[Path, Path, Path, Path], None]
    outputs: tuple[str, ...]
    compiler: Callable[[toolchain.Toolchain], Path | None]


BMV2 = Target("BMv2", "compile", compile_program, ("bmv2.json", "p4info.txtpb"), lambda found: found.p4c_bm2_ss.path)
TOFINO = Target("Tofino", "tofino", compile_tna_program, ("p4info.txtpb",), lambda found: found.p4c_barefoot.path)


def programs(root: Path) -> dict[str, tuple[Path, Target]]:
    """Every program with committed artifacts: p4src/programs.txt's for BMv2, and the Tofino program."""
    found: dict[str, tuple[Path, Target]] = {name: (source, BMV2) for name, source in pipeline.programs(root).items()}
    if (root / tna.PROGRAM).is_file():
        found[tna.BUILD_NAME] = (root / tna.PROGRAM, TOFINO)
    return found


def _relative(path: Path, root: Path) -> Path:
    return path.relative_to(root) if path.is_relative_to(root) else path


def check_sources(root: Path) -> list[Mismatch]:
    """Programs whose committed manifest does not match today's sources (no toolchain needed)."""
    current = source_digests(root)
    mismatches = []
    for program in programs(root):
        manifest_path = root / pipeline.BUILD_DIR / program / MANIFEST
        try:
            recorded = json.loads(manifest_path.read_text())["sources"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            mismatches.append(Mismatch(program, f"no readable {manifest_path.relative_to(root)} ({err})"))
            continue
        changed = sorted(path for path in current.keys() & recorded.keys() if current[path] != recorded[path])
        added = sorted(current.keys() - recorded.keys())
        removed = sorted(recorded.keys() - current.keys())
        for label, paths in (("changed", changed), ("new", added), ("gone", removed)):
            if paths:
                mismatches.append(Mismatch(program, f"{label} since the artifacts were compiled: {', '.join(paths)}"))
    return mismatches


def check_compile(compilers: dict[str, Path], root: Path, scratch: Path) -> list[Mismatch]:
    """Programs whose fresh compile (into `scratch`) differs from the committed artifacts; `compilers` maps a target's
    toolchain purpose to its compiler, and programs of a target without one are not compiled."""
    mismatches = []
    for program, (source, target) in programs(root).items():
        compiler = compilers.get(target.purpose)
        if compiler is None:
            continue
        out_dir = scratch / program
        shutil.rmtree(out_dir, ignore_errors=True)
        target.compile(compiler, source, out_dir, root)
        for name in (*target.outputs, MANIFEST):
            committed = root / pipeline.BUILD_DIR / program / name
            if not committed.is_file() or committed.read_bytes() != (out_dir / name).read_bytes():
                mismatches.append(Mismatch(program, f"{committed.relative_to(root)} differs from a fresh compile"))
    return mismatches


def main(argv: list[str] | None = None) -> int:
    root = pipeline.repo_root()
    parser = argparse.ArgumentParser(prog="python -m tng_p4.artifacts", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile", help="compile every program (BMv2 and Tofino, as their compilers are here)")
    sub.add_parser("check-sources", help="fail if a P4 source changed since the committed artifacts were compiled")
    check = sub.add_parser("check-compile", help="fail if a fresh compile differs from the committed artifacts")
    check.add_argument("--scratch", type=Path, default=root / "build" / "p4-check", help="where to compile")
    args = parser.parse_args(argv)

    if args.command == "check-sources":
        return _report(check_sources(root), f"p4 sources: the artifacts of {len(programs(root))} programs match")
    found = toolchain.detect()
    compilers: dict[str, Path] = {}
    for target in (BMV2, TOFINO):
        compiler = target.compiler(found)
        if compiler is None:
            print(f"{target.name}: {found.skip_reason(target.purpose)}")
        else:
            compilers[target.purpose] = compiler
    if not compilers:
        return toolchain.SKIP_EXIT_CODE
    try:
        if args.command == "compile":
            for program, (source, target) in programs(root).items():
                if target.purpose not in compilers:
                    continue
                out_dir = root / pipeline.BUILD_DIR / program
                compiler = compilers[target.purpose]
                print(f"{compiler.name} {source.relative_to(root)} -> {out_dir.relative_to(root)}", flush=True)
                target.compile(compiler, source, out_dir, root)
            return 0
        mismatches = check_compile(compilers, root, args.scratch)
    except CompileError as err:
        print(err, file=sys.stderr)
        return 1
    checked = ", ".join(target.name for target in (BMV2, TOFINO) if target.purpose in compilers)
    return _report(mismatches, f"p4 compile ({checked}): committed artifacts match a fresh compile")


def _report(mismatches: list[Mismatch], success: str) -> int:
    for mismatch in mismatches:
        print(f"{mismatch.line()} (run 'make p4' and commit p4src/build/)")
    if mismatches:
        return 1
    print(success)
    return 0


if __name__ == "__main__":
    sys.exit(main())
