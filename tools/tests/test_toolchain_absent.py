"""The toolchain-absent path, run on every machine: with the P4 toolchain hidden, every P4 suite of `make test` is
skipped with its one-line reason and none fails, as on a fresh machine without p4c or BMv2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import testsuites
from tng_p4 import toolchain

HIDDEN = {**os.environ, toolchain.HIDE_ENV: "1"}
REASON = f"skipped: P4 toolchain hidden by {toolchain.HIDE_ENV}=1"
BMV2_TESTS = ("controller/tests/test_bmv2_controller.py", "controller/tests/test_loops_bmv2.py")


def test_every_p4_suite_is_skipped_with_its_reason(tmp_path: Path) -> None:
    runner = testsuites.REPO / "tools" / "testsuites.py"
    p4_suites = ["p4 artifacts match a fresh compile", "ptf "]
    only = [arg for name in p4_suites for arg in ("--only", name)]
    done = subprocess.run(
        [sys.executable, str(runner), *only, "--logs", str(tmp_path)],
        cwd=testsuites.REPO,
        env=HIDDEN,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    programs = testsuites.p4_programs()
    lines = done.stdout.splitlines()
    assert lines[-1] == f"0 passed, 0 failed, {1 + len(programs)} skipped"
    verdicts = [line for line in lines if line.startswith("   ")]
    assert len(verdicts) == 1 + len(programs)
    assert all(REASON in line for line in verdicts), verdicts


def test_the_source_digest_check_still_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tng_p4.artifacts", "check-sources"],
        cwd=testsuites.REPO,
        env=HIDDEN,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("p4 sources: the artifacts of")


def test_bmv2_tests_of_pytest_are_skipped_with_the_reason(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *BMV2_TESTS],
        cwd=testsuites.REPO,
        env=HIDDEN,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary, summary
    assert REASON in done.stdout
