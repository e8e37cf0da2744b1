"""The pipeline contract in Python agrees with the P4 sources and the committed P4Info."""

from __future__ import annotations

import re
from pathlib import Path

import finsy as fy
import pytest
from tng_p4 import pipeline
from tng_p4.wire import PacketType, WireError

ROOT = pipeline.repo_root()
DEFINE_P4 = ROOT / "p4src" / "shared" / "define.p4"


def p4_constants(pattern: str) -> dict[str, int]:
    return {name: int(value, 0) for name, value in re.findall(pattern, DEFINE_P4.read_text())}


def test_drop_reasons_match_define_p4() -> None:
    declared = p4_constants(r"const drop_reason_t DROP_(\w+) = (\w+);")
    assert declared.pop("REASON_NONE") == 0xFF
    assert declared == {reason.name: reason.value for reason in pipeline.DropReason}


def test_every_receiver_error_has_its_own_drop_reason() -> None:
    reasons = [pipeline.drop_reason(error.value) for error in WireError]
    assert len(set(reasons)) == len(WireError)
    assert pipeline.drop_reason("bad_version") == pipeline.DropReason.BAD_VERSION


def test_unknown_error_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="not_an_error"):
        pipeline.drop_reason("not_an_error")


def test_programs_file_lists_tng_wire() -> None:
    assert pipeline.programs(ROOT)["tng_wire"] == ROOT / "p4src" / "v1model" / "tng_wire.p4"


def test_programs_file_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "p4src").mkdir()
    (tmp_path / "p4src" / "programs.txt").write_text("# comment\n\np4src/v1model/a.p4\n  p4src/tna/b.p4  \n")
    assert pipeline.programs(tmp_path) == {
        "a": tmp_path / "p4src/v1model/a.p4",
        "b": tmp_path / "p4src/tna/b.p4",
    }


@pytest.mark.parametrize("program", sorted(pipeline.programs(ROOT)))
def test_every_program_has_committed_artifacts(program: str) -> None:
    assert pipeline.artifacts(program, ROOT / pipeline.BUILD_DIR).missing() == []


def test_missing_artifacts_are_listed(tmp_path: Path) -> None:
    artifacts = pipeline.artifacts("tng_wire", tmp_path)
    (tmp_path / "tng_wire").mkdir()
    artifacts.bmv2_json.write_text("{}")
    assert artifacts.missing() == [tmp_path / "tng_wire" / "p4info.txtpb"]


def test_tng_wire_p4info_has_the_public_names() -> None:
    artifacts = pipeline.artifacts("tng_wire", ROOT / pipeline.BUILD_DIR)
    schema = fy.P4Schema(artifacts.p4info)
    table = schema.tables[pipeline.PORT_FORWARD]
    assert [field.name for field in table.match_fields] == [pipeline.PORT_FORWARD_KEY]
    assert {ref.name for ref in table.actions} == {pipeline.FORWARD, pipeline.DROP}
    assert [param.name for param in schema.actions[pipeline.FORWARD].params] == [pipeline.FORWARD_PORT]
    assert schema.counters[pipeline.WIRE_DROPS].size > max(pipeline.DropReason)
    assert schema.counters[pipeline.WIRE_PACKETS].size > max(PacketType)


def test_visible_decisions_match_pipeline_define_p4() -> None:
    text = (ROOT / "p4src" / "shared" / "pipeline_define.p4").read_text()
    declared = {name: int(value) for name, value in re.findall(r"#define VISIBLE_(\w+) (\d+)\n", text)}
    declared.pop("EWMA_FRACTION_BITS")  # a VISIBLE constant, not a decision
    count = declared.pop("DECISION_COUNT")
    assert declared == {decision.name: decision.value for decision in pipeline.VisibleDecision}
    assert count > max(pipeline.VisibleDecision)


def test_tng_p4info_has_the_counters_experiments_read() -> None:
    schema = fy.P4Schema(pipeline.artifacts("tng", ROOT / pipeline.BUILD_DIR).p4info)
    for name in (pipeline.STEERED, pipeline.PORT_TX, pipeline.DROPS, pipeline.VISIBLE_DECISIONS):
        assert schema.counters[name].size > 0
