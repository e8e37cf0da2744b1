"""Add one libFuzzer run's executions to a target's cumulative count in a JSON file (`make fuzz`).

libFuzzer, run with -print_final_stats=1, ends its output with `stat::number_of_executed_units: N`.
The file maps each target to {"executions": total, "runs": count, "seconds": total}.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

FINAL_STATS = re.compile(r"^stat::number_of_executed_units:\s*(\d+)\s*$", re.MULTILINE)


def executions_in(log: str) -> int:
    """The executions libFuzzer's final stats report; ValueError if the log has none."""
    found = FINAL_STATS.findall(log)
    if not found:
        raise ValueError("no 'stat::number_of_executed_units' line: was libFuzzer run with -print_final_stats=1?")
    return int(found[-1])


def record(path: Path, target: str, executions: int, seconds: float) -> dict:
    """Adds a run to `path` (created if missing) and returns the whole table."""
    table = json.loads(path.read_text()) if path.exists() else {}
    entry = table.setdefault(target, {"executions": 0, "runs": 0, "seconds": 0})
    entry["executions"] += executions
    entry["runs"] += 1
    entry["seconds"] += seconds
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json", type=Path, help="cumulative executions file, e.g. build/fuzz/executions.json")
    parser.add_argument("target")
    parser.add_argument("log", type=Path, help="the run's libFuzzer output")
    parser.add_argument("--seconds", type=float, required=True, help="how long the run lasted")
    args = parser.parse_args(argv)
    try:
        executions = executions_in(args.log.read_text(errors="replace"))
    except (OSError, ValueError) as error:
        print(f"fuzz_executions: {args.log}: {error}", file=sys.stderr)
        return 1
    table = record(args.json, args.target, executions, args.seconds)
    total = table[args.target]["executions"]
    print(f"fuzz: {args.target}: {executions} executions this run, {total} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
