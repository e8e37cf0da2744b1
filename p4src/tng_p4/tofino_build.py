"""The Tofino compile's outputs as they are committed under p4src/build/tng_tna/: the same sources give the same bytes,
and a resource summary says what the program takes of Tofino 1.

- `context.json`, what the driver (bf_switchd) loads, written by the assembler: without `build_date` and `run_id`,
  which change on every run;
- `bfrt.json`, the BF-RT schema: the fields of the snapshot tables sorted by name (p4c-barefoot lists them in an order
  that changes from run to run, docs/tofino.md);
- `resources.json`: the stages each gress uses out of the device's, and per stage what the program uses of the logical
  tables, gateways, SRAM, map RAM, TCAM and stateful ALUs next to what a stage has, and where each register lives.
  It is read from the compiler's own report (`pipe/logs/resources.json`, written with `-g`), the assembly (the stage
  list of each gress) and context.json (the registers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CONTEXT = "context.json"
BFRT = "bfrt.json"
RESOURCES = "resources.json"
OUTPUTS = (BFRT, CONTEXT, RESOURCES)

# Keys of context.json that change on every run of the compiler.
VOLATILE_CONTEXT_KEYS = ("build_date", "run_id")
SNAPSHOT_PREFIX = "pipe.snapshot."
_STAGE_RE = re.compile(r"^stage (\d+) (ingress|egress):", re.MULTILINE)


class OutputError(RuntimeError):
    """An output the compile should have left is missing or unreadable; the message names it."""


def normalize_context(context: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in context.items() if key not in VOLATILE_CONTEXT_KEYS}


def normalize_bfrt(schema: dict[str, Any]) -> dict[str, Any]:
    tables = []
    for table in schema.get("tables", []):
        if table.get("name", "").startswith(SNAPSHOT_PREFIX) and isinstance(table.get("data"), list):
            table = {**table, "data": sorted(table["data"], key=_field_name)}
        tables.append(table)
    return {**schema, "tables": tables}


def _field_name(field: dict[str, Any]) -> str:
    return str(field.get("singleton", field).get("name", ""))


def stages_by_gress(assembly: str) -> dict[str, int]:
    """How many stages each gress uses, from the assembly's `stage N ingress:` sections (the last one plus one)."""
    used: dict[str, int] = {"ingress": 0, "egress": 0}
    for match in _STAGE_RE.finditer(assembly):
        used[match.group(2)] = max(used[match.group(2)], int(match.group(1)) + 1)
    return used


def resource_summary(report: dict[str, Any], assembly: str, context: dict[str, Any]) -> dict[str, Any]:
    """Stages, per-stage use against a stage's capacity, totals, and the registers' places.

    `report` is the compiler's pipe/logs/resources.json, `assembly` the .bfa, `context` the assembler's context.json."""
    mau = report["resources"]["mau"]
    per_stage = []
    capacity: dict[str, int] = {}
    for stage in mau["mau_stages"]:
        use, capacity = _stage_use(stage)
        per_stage.append({"stage": stage["stage_number"], **use})
    per_stage.sort(key=lambda row: row["stage"])
    totals = {key: sum(row[key] for row in per_stage) for key in capacity}
    registers = sorted(
        (
            {
                "name": table["name"],
                "gress": table["direction"],
                "stages": sorted({stage["stage_number"] for stage in table.get("stage_tables", [])}),
                "cells": table["size"],
                "cell_bits": table["alu_width"] * (2 if table.get("dual_width_mode") else 1),
            }
            for table in context.get("tables", [])
            if table.get("table_type") == "stateful"
        ),
        key=lambda register: register["name"],
    )
    return {
        "target": context.get("target"),
        "compiler_version": context.get("compiler_version"),
        "stages_available": mau["nStages"],
        "stages": stages_by_gress(assembly),
        "per_stage_capacity": capacity,
        "per_stage": per_stage,
        "totals": totals,
        "registers": registers,
    }


def _stage_use(stage: dict[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
    """What one stage of the report uses, and what a stage has, under the same keys."""
    rams, tcams, map_rams = stage["rams"], stage["tcams"], stage["map_rams"]
    gateways, alus, tables = stage["gateways"], stage["meter_alus"], stage["logical_tables"]
    use = {
        "logical_tables": len(tables["ids"]),
        "gateways": len(gateways["gateways"]),
        "sram": len(rams["srams"]),
        "map_ram": len(map_rams["maprams"]),
        "tcam": len(tcams["tcams"]),
        "stateful_alus": len(alus["meters"]),
    }
    capacity = {
        "logical_tables": tables["size"],
        "gateways": gateways["nRows"] * gateways["nUnits"],
        "sram": rams["nRows"] * rams["nColumns"],
        "map_ram": map_rams["nRows"] * map_rams["nUnits"],
        "tcam": tcams["nRows"] * tcams["nColumns"],
        "stateful_alus": alus["nAlus"],
    }
    return use, capacity


def write_outputs(backend_dir: Path, assembly_name: str, out_dir: Path) -> None:
    """Writes the committed outputs into `out_dir` from a compile in `backend_dir` (p4c-barefoot's -o with -g and its
    BF-RT schema, the assembler's output in `bin/`)."""
    context = _read_json(backend_dir / "bin" / CONTEXT)
    report = _read_json(backend_dir / "pipe" / "logs" / RESOURCES)
    assembly_path = backend_dir / "pipe" / assembly_name
    try:
        assembly = assembly_path.read_text()
    except OSError as err:
        raise OutputError(f"the compile left no assembly {assembly_path} ({err})") from err
    try:
        summary = resource_summary(report, assembly, context)
    except (KeyError, TypeError) as err:
        raise OutputError(f"unexpected layout of the compiler's resource report ({err!r})") from err
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / CONTEXT, normalize_context(context))
    _write_json(out_dir / BFRT, normalize_bfrt(_read_json(backend_dir / BFRT)))
    _write_json(out_dir / RESOURCES, summary)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise OutputError(f"the compile left no readable {path} ({err})") from err
    if not isinstance(value, dict):
        raise OutputError(f"{path} holds {type(value).__name__}, not a JSON object")
    return value


def _write_json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n")
