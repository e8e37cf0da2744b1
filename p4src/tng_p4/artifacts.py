"""The compiled P4 artifacts under p4src/build/: compile them, and check that they match the sources.

Every program's build directory holds its compiler's outputs and `sources.json`, a manifest of the SHA-256 of every P4
source they were compiled from. The BMv2 programs of p4src/programs.txt give `bmv2.json` and `p4info.txtpb`
(p4c-bm2-ss); the Tofino program (`tng_tna`, p4src/tna/tng.p4) gives `p4info.txtpb`, `bfrt.json`, `context.json` and
`resources.json` (p4c-barefoot, then its assembler bfas; normalized by tng_p4.tofino_build). Two checks read the
manifests:

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

from tng_p4 import pipeline, tna, tofino_build, toolchain

MANIFEST = "sources.json"
SOURCE_ROOT = Path("p4src")
# The Tofino compile: the P4Info with P4Runtime's standard counter and digest messages (what the controller reads on
# either target), the BF-RT schema, and the assembly with -g (the compiler's resource report); then bfas assembles it,
# checking the device's limits that p4c-barefoot lets through, and writes context.json (docs/tofino.md).
TNA_FLAGS = ("--target", "tofino", "--arch", "tna", "--p4runtime-force-std-externs", "-g")


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


def compile_program(compilers: tuple[Path, ...], source: Path, out_dir: Path, root: Path) -> None:
    """Compiles `source` for BMv2 with `compilers` (p4c-bm2-ss) into `out_dir` (bmv2.json, p4info.txtpb) and writes its
    source manifest.

    p4c runs from the repository root on relative paths: the JSON records source paths, and relative ones keep it the
    same on every machine."""
    (p4c_bm2_ss,) = compilers
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


def compile_tna_program(compilers: tuple[Path, ...], source: Path, out_dir: Path, root: Path) -> None:
    """Compiles `source` for Tofino (TNA) with `compilers` (p4c-barefoot, bfas) into `out_dir` (p4info.txtpb and
    tng_p4.tofino_build's outputs) and writes its source manifest."""
    p4c_barefoot, bfas = compilers
    out_dir.mkdir(parents=True, exist_ok=True)
    out = _relative(out_dir.resolve(), root.resolve())
    with tempfile.TemporaryDirectory(prefix="tng-tna-") as scratch:
        backend = Path(scratch)
        command = [
            str(p4c_barefoot),
            *TNA_FLAGS,
            "-I",
            str(SOURCE_ROOT),
            "--p4runtime-files",
            str(out / "p4info.txtpb"),
            "--bf-rt-schema",
            str(backend / tofino_build.BFRT),
            "-o",
            str(backend),
            str(_relative(source.resolve(), root.resolve())),
        ]
        _run_compiler(command, root)
        assembly = f"{source.stem}.bfa"
        _run_compiler([str(bfas), assembly, "-o", str(backend / "bin")], backend / "pipe")
        try:
            tofino_build.write_outputs(backend, assembly, out_dir)
        except tofino_build.OutputError as err:
            raise CompileError(str(err)) from err
    _write_manifest(out_dir, "tna", source, root)


def _run_compiler(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0:
        raise CompileError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}".rstrip())


def _write_manifest(out_dir: Path, arch: str, source: Path, root: Path) -> None:
    manifest = {"arch": arch, "program": str(source.relative_to(root)), "sources": source_digests(root)}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True, slots=True)
class Target:
    """How one target's programs are compiled: the toolchain purpose that finds its compilers, the compile as a
    function (compilers, source, out_dir, root), the files it writes besides the manifest, and the compilers' paths
    as found (None when one is missing)."""

    name: str
    purpose: toolchain.Purpose
    compile: Callable[[tuple[Path, ...], Path, Path, Path], None]
    outputs: tuple[str, ...]
    compilers: Callable[[toolchain.Toolchain], tuple[Path | None, ...]]


BMV2 = Target("BMv2", "compile", compile_program, ("bmv2.json", "p4info.txtpb"), lambda found: (found.p4c_bm2_ss.path,))
TOFINO = Target(
    "Tofino",
    "tofino",
    compile_tna_program,
    ("p4info.txtpb", *tofino_build.OUTPUTS),
    lambda found: (found.p4c_barefoot.path, found.bfas.path),
)


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


def check_compile(compilers: dict[str, tuple[Path, ...]], root: Path, scratch: Path) -> list[Mismatch]:
    """Programs whose fresh compile (into `scratch`) differs from the committed artifacts; `compilers` maps a target's
    toolchain purpose to its compilers, and programs of a target without them are not compiled."""
    mismatches = []
    for program, (source, target) in programs(root).items():
        tools = compilers.get(target.purpose)
        if tools is None:
            continue
        out_dir = scratch / program
        shutil.rmtree(out_dir, ignore_errors=True)
        target.compile(tools, source, out_dir, root)
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
    compilers: dict[str, tuple[Path, ...]] = {}
    for target in (BMV2, TOFINO):
        paths = target.compilers(found)
        if any(path is None for path in paths):
            print(f"{target.name}: {found.skip_reason(target.purpose)}")
        else:
            compilers[target.purpose] = tuple(path for path in paths if path is not None)
    if not compilers:
        return toolchain.SKIP_EXIT_CODE
    try:
        if args.command == "compile":
            for program, (source, target) in programs(root).items():
                if target.purpose not in compilers:
                    continue
                out_dir = root / pipeline.BUILD_DIR / program
                tools = compilers[target.purpose]
                print(f"{tools[0].name} {source.relative_to(root)} -> {out_dir.relative_to(root)}", flush=True)
                target.compile(tools, source, out_dir, root)
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
