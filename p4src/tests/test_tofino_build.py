"""tng_p4.tofino_build: the normalized Tofino outputs and the resource summary, and what the committed summary says."""

from __future__ import annotations

import json
from pathlib import Path

from tng_p4 import pipeline, tna, tofino_build

ROOT = Path(__file__).resolve().parents[2]


def stage(number: int, tables: int, srams: int, alus: int) -> dict[str, object]:
    return {
        "stage_number": number,
        "logical_tables": {"ids": [{"id": i} for i in range(tables)], "size": 16},
        "gateways": {"gateways": [{}], "nRows": 8, "nUnits": 2},
        "rams": {"srams": [{}] * srams, "nRows": 8, "nColumns": 10},
        "map_rams": {"maprams": [], "nRows": 8, "nUnits": 6},
        "tcams": {"tcams": [], "nRows": 12, "nColumns": 2},
        "meter_alus": {"meters": [{}] * alus, "nAlus": 4},
    }


def test_summary_counts_stages_per_gress_and_use_per_stage() -> None:
    report = {"resources": {"mau": {"nStages": 12, "mau_stages": [stage(1, 5, 2, 1), stage(0, 16, 4, 0)]}}}
    assembly = "stage 0 ingress:\n  x\nstage 0 egress:\nstage 1 egress:\nstage 2 egress:\n"
    context = {
        "target": "tofino",
        "compiler_version": "9.13.4",
        "tables": [
            {"name": "t", "table_type": "match"},
            {
                "name": "ingress.visible.burst",
                "direction": "egress",
                "table_type": "stateful",
                "size": 4096,
                "alu_width": 32,
                "dual_width_mode": True,
                "stage_tables": [{"stage_number": 3}],
            },
        ],
    }
    summary = tofino_build.resource_summary(report, assembly, context)
    assert summary["stages"] == {"ingress": 1, "egress": 3}
    assert summary["stages_available"] == 12
    assert [row["stage"] for row in summary["per_stage"]] == [0, 1]
    assert summary["per_stage"][1] == {
        "stage": 1,
        "logical_tables": 5,
        "gateways": 1,
        "sram": 2,
        "map_ram": 0,
        "tcam": 0,
        "stateful_alus": 1,
    }
    assert summary["per_stage_capacity"] == {
        "logical_tables": 16,
        "gateways": 16,
        "sram": 80,
        "map_ram": 48,
        "tcam": 24,
        "stateful_alus": 4,
    }
    assert summary["totals"]["logical_tables"] == 21 and summary["totals"]["sram"] == 6
    assert summary["registers"] == [
        {"name": "ingress.visible.burst", "gress": "egress", "stages": [3], "cells": 4096, "cell_bits": 64}
    ]


def test_context_loses_only_what_changes_every_run() -> None:
    context = {"build_date": "Sat Dec  5 16:13:10 2026", "run_id": "154c8cd657324b77", "tables": [1], "target": "t"}
    assert tofino_build.normalize_context(context) == {"tables": [1], "target": "t"}


def test_only_snapshot_fields_are_sorted() -> None:
    fields = [{"singleton": {"name": "b"}}, {"singleton": {"name": "a"}}]
    schema = {
        "schema_version": "1",
        "tables": [{"name": "pipe.snapshot.cfg", "data": fields}, {"name": "pipe.ingress.t", "data": fields}],
    }
    normalized = tofino_build.normalize_bfrt(schema)
    assert [f["singleton"]["name"] for f in normalized["tables"][0]["data"]] == ["a", "b"]
    assert normalized["tables"][1]["data"] == fields


def test_the_committed_program_fits_tofino_1() -> None:
    # What bfas accepted when the artifacts were compiled (make p4-check keeps them current): both gresses within the
    # device's stages, and no stage over any of its resources.
    summary = json.loads((ROOT / pipeline.BUILD_DIR / tna.BUILD_NAME / tofino_build.RESOURCES).read_text())
    assert summary["target"] == "tofino"
    assert 0 < summary["stages"]["ingress"] <= summary["stages_available"]
    assert 0 < summary["stages"]["egress"] <= summary["stages_available"]
    for row in summary["per_stage"]:
        for resource, capacity in summary["per_stage_capacity"].items():
            assert row[resource] <= capacity, (row["stage"], resource)
    visible = {r["name"] for r in summary["registers"] if r["name"].startswith("ingress.visible.")}
    assert len(visible) == 12
