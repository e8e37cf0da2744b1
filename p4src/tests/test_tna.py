"""The Tofino (TNA) program: it passes p4c's front and mid end for TNA, and its P4Info (p4src/build/tng_tna/, compiled
by p4c-barefoot) names the tables, actions, counters and digest of the v1model program's P4Info
(p4src/build/tng/p4info.txtpb) with the same ids, so one controller drives either target."""

from __future__ import annotations

from pathlib import Path

import pytest
from tng_p4 import pipeline, tna

ROOT = pipeline.repo_root()


@pytest.fixture(scope="module")
def front_end() -> tna.FrontEndResult:
    setup = tna.find()
    reason = setup.skip_reason()
    if reason:
        pytest.skip(reason)
    return tna.front_end(ROOT, setup)


def test_tna_program_passes_p4test_front_and_mid_end(front_end: tna.FrontEndResult) -> None:
    assert front_end.returncode == 0, front_end.output
    assert "error:" not in front_end.output, front_end.output  # p4c prints "[--Werror=...] error: ..."
    assert front_end.midend


def test_tna_program_names_what_the_v1model_p4info_names(front_end: tna.FrontEndResult) -> None:
    # Besides the names of tna.TNA_ONLY (the queue reports, docs/tofino.md), which it must still declare.
    v1model = tna.p4info_names((ROOT / tna.V1MODEL_P4INFO).read_text())
    declared = tna.declared_names(front_end.midend)
    assert all(v1model[kind] for kind in tna.KINDS)
    assert {kind: declared[kind] - tna.TNA_ONLY[kind] for kind in tna.KINDS} == v1model
    assert all(tna.TNA_ONLY[kind] <= declared[kind] for kind in tna.KINDS)


def test_tofino_p4info_names_and_ids_are_the_v1model_ones() -> None:
    # The committed P4Infos: make p4-check keeps both fresh. Besides the names of tna.TNA_ONLY; ids differ only for
    # tna.TARGET_SPECIFIC_IDS (docs/tofino.md).
    v1model = tna.p4info_ids((ROOT / tna.V1MODEL_P4INFO).read_text())
    tofino = tna.p4info_ids((ROOT / tna.TNA_P4INFO).read_text())
    for kind in tna.KINDS:
        assert v1model[kind], kind
        assert set(tofino[kind]) - tna.TNA_ONLY[kind] == set(v1model[kind]), kind
        assert tna.TNA_ONLY[kind] <= set(tofino[kind]), kind
        differing = {name for name, entity_id in v1model[kind].items() if tofino[kind][name] != entity_id}
        assert differing == tna.TARGET_SPECIFIC_IDS[kind], kind


MIDEND = """
    @name(".NoAction") action NoAction_1() {
    }
    @hidden @name("ingress.visible.to_helper") action visible_to_helper_0() {
    }
    @name("ingress.forwarding.route") action forwarding_route_0(@name("port") bit<9> port) {
    }
    @name("ingress.forwarding.routes") table forwarding_routes {
    @name("ingress.drops") Counter<bit<64>, bit<8>>(32w17, CounterType_t.PACKETS_AND_BYTES) drops_0;
    @name(".new_flow_digest_t") Digest<new_flow_digest_t>(3w1) new_flow_digest_0;
    @name("ingress.visible.flow_owner") Register<flow_owner_t, bit<12>>(32w4096) visible_flow_owner;
"""

P4INFO = """tables {
  preamble {
    id: 41001
    name: "ingress.forwarding.routes"
    alias: "routes"
  }
}
actions {
  preamble {
    id: 21257015
    name: "NoAction"
  }
}
counters {
  preamble {
    id: 3001
    name: "ingress.drops"
  }
}
digests {
  preamble {
    id: 385
    name: "new_flow_digest_t"
  }
}
"""


def test_declared_names_reads_the_midend_annotations_without_hidden_actions() -> None:
    assert tna.declared_names(MIDEND) == {
        "tables": {"ingress.forwarding.routes"},
        "actions": {"NoAction", "ingress.forwarding.route"},
        "counters": {"ingress.drops"},
        "digests": {"new_flow_digest_t"},
    }


def test_p4info_ids_reads_every_kind() -> None:
    assert tna.p4info_ids(P4INFO) == {
        "tables": {"ingress.forwarding.routes": 41001},
        "actions": {"NoAction": 21257015},
        "counters": {"ingress.drops": 3001},
        "digests": {"new_flow_digest_t": 385},
    }


def test_p4info_names_reads_every_kind() -> None:
    assert tna.p4info_names(P4INFO) == {
        "tables": {"ingress.forwarding.routes"},
        "actions": {"NoAction"},
        "counters": {"ingress.drops"},
        "digests": {"new_flow_digest_t"},
    }


def test_include_dir_comes_from_the_environment_if_it_holds_tna_p4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tna.INCLUDE_ENV, str(tmp_path))
    assert tna.find_include() is None
    (tmp_path / "tna.p4").write_text("")
    assert tna.find_include() == tmp_path


def test_include_dir_is_found_beside_an_installed_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    p4test = tmp_path / "bin" / "p4test"
    p4test.write_text("#!/bin/sh\n")
    p4test.chmod(0o755)
    include = tmp_path / "share" / "p4c" / "p4include"
    include.mkdir(parents=True)
    (include / "tna.p4").write_text("")
    monkeypatch.delenv(tna.INCLUDE_ENV, raising=False)
    monkeypatch.setenv("P4C", str(tmp_path / "bin" / "absent-p4c"))
    monkeypatch.setenv(tna.P4TEST_ENV, str(p4test))
    assert tna.find_include() == include


def test_include_dir_is_found_in_the_build_tree_of_p4c_barefoot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build"
    compiler = build / "backends" / "tofino" / "bf-p4c" / "p4c-barefoot"
    compiler.parent.mkdir(parents=True)
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    (build / "p4include").mkdir()
    (build / "p4include" / "tna.p4").write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "p4c-barefoot").symlink_to(compiler)
    for variable in (tna.INCLUDE_ENV, "P4C", tna.P4TEST_ENV, "P4C_BAREFOOT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert tna.find_include() == build / "p4include"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("P4C_BAREFOOT", str(compiler))
    assert tna.find_include() == build / "p4include"


def test_hidden_toolchain_skips_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TNG_HIDE_P4_TOOLCHAIN", "1")
    setup = tna.find()
    assert setup == tna.Setup(None, None)
    assert setup.skip_reason() == "skipped: P4 toolchain hidden by TNG_HIDE_P4_TOOLCHAIN=1"


def test_missing_includes_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TNG_HIDE_P4_TOOLCHAIN", raising=False)
    reason = tna.Setup(Path("/usr/bin/p4test"), None).skip_reason()
    assert reason is not None and tna.INCLUDE_ENV in reason and "p4test missing" not in reason
