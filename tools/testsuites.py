"""Run every test suite of the repository and print one closing line summing them all."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_EXIT = 3  # exit status by which a suite says "cannot run here" (see tng_p4.toolchain)
CARGO_RESULT = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")


@dataclass(slots=True)
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        return self

    def line(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    command: list[str]
    count: Callable[[str, int, Path], Counts]
    env: dict[str, str] | None = None
    artifact: Path | None = None  # result file the counter reads (JUnit XML, or a directory of them)
    may_skip: bool = False  # exit status 3 means "cannot run here", with the reason on the last line


def count_exit(_output: str, status: int, _artifact: Path) -> Counts:
    """One check that passes or fails by its exit status."""
    return Counts(passed=1) if status == 0 else Counts(failed=1)


def count_cargo(output: str, status: int, _artifact: Path) -> Counts:
    counts = Counts()
    for match in CARGO_RESULT.finditer(output):
        counts += Counts(int(match[1]), int(match[2]), int(match[3]))
    if status != 0 and counts.failed == 0:
        counts.failed = 1  # a build error or a crashed test binary: no result line says so
    return counts


def count_junit(_output: str, status: int, artifact: Path) -> Counts:
    try:
        root = ET.parse(artifact).getroot()
    except (OSError, ET.ParseError):
        return Counts(failed=1)
    counts = Counts()
    for suite in root.iter("testsuite"):
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        counts += Counts(tests - failed - skipped, failed, skipped)
    if status != 0 and counts.failed == 0:
        counts.failed = 1
    return counts


def suites(py: str, logs: Path) -> list[Suite]:
    cargo_env = {"CARGO_TERM_COLOR": "never"}
    return [
        Suite("lint: cargo fmt", ["cargo", "fmt", "--all", "--check"], count_exit),
        Suite(
            "lint: clippy",
            ["cargo", "clippy", "--workspace", "--all-targets", "--profile", "ci", "--", "-D", "warnings"],
            count_exit,
            cargo_env,
        ),
        Suite("lint: ruff check", [py, "-m", "ruff", "check", "."], count_exit),
        Suite("lint: ruff format", [py, "-m", "ruff", "format", "--check", "."], count_exit),
        Suite(
            "cargo test",
            ["cargo", "test", "--workspace", "--profile", "ci", "--no-fail-fast"],
            count_cargo,
            cargo_env,
        ),
        Suite(
            "pytest",
            [py, "-m", "pytest", "-q", f"--junitxml={logs / 'pytest.xml'}"],
            count_junit,
            artifact=logs / "pytest.xml",
        ),
        Suite("p4 artifacts match sources", [py, "-m", "tng_p4.artifacts", "check-sources"], count_exit),
        Suite(
            "p4 artifacts match a fresh compile",
            [py, "-m", "tng_p4.artifacts", "check-compile", "--scratch", str(logs / "p4-check")],
            count_exit,
            may_skip=True,
        ),
        *(
            Suite(
                f"ptf {program} (BMv2)",
                [py, "-m", "tng_p4.run_ptf", "--program", program, "--work-dir", str(logs / "ptf" / program)],
                count_junit_dir,
                artifact=logs / "ptf" / program,
                may_skip=True,
            )
            for program in p4_programs()
        ),
    ]


def p4_programs() -> list[str]:
    """Program names (file stems) listed in p4src/programs.txt, in order."""
    listing = REPO / "p4src" / "programs.txt"
    lines = listing.read_text().splitlines() if listing.exists() else []
    return [Path(line.strip()).stem for line in lines if line.strip() and not line.lstrip().startswith("#")]


def count_junit_dir(output: str, status: int, artifact: Path) -> Counts:
    counts = Counts()
    for xml in sorted(artifact.glob("**/*.xml")):
        counts += count_junit(output, 0, xml)
    if status != 0 and counts.failed == 0:
        counts.failed = 1
    return counts


def run(suite: Suite, logs: Path) -> Counts:
    slug = re.sub(r"[^a-z0-9]+", "-", suite.name.lower()).strip("-")
    log = logs / f"{slug}.log"
    print(f"== {suite.name}: {' '.join(suite.command)}", flush=True)
    started = time.monotonic()
    env = {**os.environ, **(suite.env or {})}
    with log.open("w") as sink:
        proc = subprocess.run(suite.command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False)
    output = log.read_text(errors="replace")
    elapsed = time.monotonic() - started
    if suite.may_skip and proc.returncode == SKIP_EXIT:
        print(f"   {suite.name}: {last_line(output) or 'skipped'} [{elapsed:.0f} s]", flush=True)
        return Counts(skipped=1)
    counts = suite.count(output, proc.returncode, suite.artifact or log)
    print(f"   {suite.name}: {counts.line()} [{elapsed:.0f} s, log {shown(log)}]", flush=True)
    if counts.failed:
        tail = "\n".join(output.splitlines()[-40:])
        print(f"--- last lines of {shown(log)} ---\n{tail}\n---", flush=True)
    return counts


def shown(path: Path) -> Path:
    """`path` relative to the repository when it lies inside it."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("make")]
    return lines[-1].strip() if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(prog="tools/testsuites.py", description=__doc__)
    parser.add_argument("--only", action="append", help="run only suites whose name contains this text")
    parser.add_argument("--logs", type=Path, default=REPO / "build" / "test-logs", help="where suite logs go")
    args = parser.parse_args()
    logs = args.logs.resolve()
    logs.mkdir(parents=True, exist_ok=True)
    for stale in logs.glob("**/*.xml"):
        stale.unlink()  # counts must come from this run only
    total = Counts()
    for suite in suites(sys.executable, logs):
        if args.only and not any(text in suite.name for text in args.only):
            continue
        total += run(suite, logs)
    print(total.line(), flush=True)
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main())
