"""The toolchain-absent path, run on every machine: with the P4 toolchain hidden, every P4 suite of `make test` is
skipped with its one-line reason and none fails, as on a fresh machine without p4c or BMv2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import testsuites
from tng_p4 import toolchain

REASON = f"skipped: P4 toolchain hidden by {toolchain.HIDE_ENV}=1"
# Every pytest file that needs BMv2 (they skip on the toolchain's reason).
BMV2_TESTS = sorted(
    str(path.relative_to(testsuites.REPO))
    for path in (testsuites.REPO / "controller" / "tests").glob("test_*.py")
    if 'skip_reason("bmv2")' in path.read_text()
)


def hidden(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` run from the repository with the toolchain hidden; fails the test unless it exits 0."""
    done = subprocess.run(
        argv,
        cwd=testsuites.REPO,
        env={**os.environ, toolchain.HIDE_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_every_p4_suite_is_skipped_with_its_reason(tmp_path: Path) -> None:
    runner = testsuites.REPO / "tools" / "testsuites.py"
    p4_suites = ["p4 artifacts match a fresh compile", "ptf "]
    only = [arg for name in p4_suites for arg in ("--only", name)]
    lines = hidden(sys.executable, str(runner), *only, "--logs", str(tmp_path)).stdout.splitlines()
    programs = testsuites.p4_programs()
    assert lines[-1] == f"0 passed, 0 failed, {1 + len(programs)} skipped"
    verdicts = [line for line in lines if line.startswith("   ")]
    assert len(verdicts) == 1 + len(programs)
    assert all(REASON in line for line in verdicts), verdicts


def test_the_source_digest_check_still_runs() -> None:
    output = hidden(sys.executable, "-m", "tng_p4.artifacts", "check-sources").stdout
    assert output.startswith("p4 sources: the artifacts of")


def test_bmv2_tests_of_pytest_are_skipped_with_the_reason() -> None:
    output = hidden(sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *BMV2_TESTS).stdout
    assert len(BMV2_TESTS) >= 3
    summary = output.strip().splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary, summary
    assert REASON in output
