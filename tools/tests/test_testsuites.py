"""The repository test runner sums every suite into one closing line."""

import sys
from pathlib import Path

import testsuites
from testsuites import Counts, Suite, count_cargo, count_exit, count_junit

CARGO_OUTPUT = """
running 3 tests
test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s
running 2 tests
test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
"""

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10"></testsuite></testsuites>
"""


def test_cargo_result_lines_are_summed() -> None:
    assert count_cargo(CARGO_OUTPUT, 101, Path()) == Counts(passed=4, failed=1, skipped=1)


def test_cargo_build_failure_without_result_line_counts_as_failure() -> None:
    assert count_cargo("error[E0425]: cannot find value", 101, Path()) == Counts(failed=1)


def test_junit_counts_errors_as_failures(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text(JUNIT)
    assert count_junit("", 1, xml) == Counts(passed=4, failed=3, skipped=3)


def test_missing_junit_file_is_a_failure(tmp_path: Path) -> None:
    assert count_junit("", 0, tmp_path / "absent.xml") == Counts(failed=1)


def test_suite_that_cannot_run_is_skipped_with_its_reason(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(testsuites, "REPO", tmp_path)
    script = "print('skipped: no simple_switch_grpc'); raise SystemExit(3)"
    suite = Suite("fake", [sys.executable, "-c", script], count_exit, may_skip=True)
    assert testsuites.run(suite, tmp_path) == Counts(skipped=1)
    assert "skipped: no simple_switch_grpc" in capsys.readouterr().out


def test_exit_three_is_a_failure_for_suites_that_cannot_skip(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(testsuites, "REPO", tmp_path)
    suite = Suite("fake", [sys.executable, "-c", "raise SystemExit(3)"], count_exit)
    assert testsuites.run(suite, tmp_path) == Counts(failed=1)


def test_counts_line_is_the_closing_line_format() -> None:
    assert Counts(5, 0, 2).line() == "5 passed, 0 failed, 2 skipped"
