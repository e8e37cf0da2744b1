"""Read the xunit (JUnit XML) files PTF writes with --xunit into per-test outcomes and a summary line."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Outcome = Literal["passed", "failed", "skipped"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class TestResult:
    """One test case: its name (PTF module.Class), outcome and the failure or skip message."""

    __test__ = False  # not a pytest test class

    name: str
    outcome: Outcome
    message: str = ""


def read_results(directory: Path) -> list[TestResult]:
    """Every test case in every *.xml under `directory`, sorted by name; errors count as failures."""
    results = []
    for path in sorted(directory.glob("*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            results.append(_result(case))
    return sorted(results, key=lambda result: result.name)


def _result(case: ET.Element) -> TestResult:
    name = case.get("classname", "")
    if case.get("name", "runTest") != "runTest":
        name = f"{name}.{case.get('name')}"
    for tag, outcome in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
        element = case.find(tag)
        if element is not None:
            return TestResult(name, outcome, element.get("message") or (element.text or "").strip())
    return TestResult(name, "passed")


def counts(results: list[TestResult]) -> dict[Outcome, int]:
    tally = Counter(result.outcome for result in results)
    return {outcome: tally[outcome] for outcome in OUTCOMES}


def summary_line(label: str, results: list[TestResult]) -> str:
    """'label: N passed, N failed, N skipped', the closing line test runners are read by."""
    tally = counts(results)
    return f"{label}: {tally['passed']} passed, {tally['failed']} failed, {tally['skipped']} skipped"
