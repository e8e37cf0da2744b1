"""tng_p4.artifacts on a repository of its own: source manifests, stale-artifact detection, fresh-compile compare."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from tng_p4 import artifacts, tofino_build

# A stand-in for p4c-bm2-ss: writes its outputs from the source's bytes, so equal sources give equal artifacts.
FAKE_P4C = """#!/bin/sh
while [ $# -gt 1 ]; do
  case "$1" in --p4runtime-files) info=$2; shift;; -o) json=$2; shift;; esac; shift
done
[ -n "$FAIL" ] && { echo "syntax error" >&2; exit 1; }
cp "$1" "$json"; echo "info of $1" > "$info"
"""


# Stand-ins for p4c-barefoot and bfas: the P4Info from the source's name, a BF-RT schema whose snapshot fields come in
# the other order on every other run, an assembly of 1 ingress and 2 egress stages, the compiler's resource report (from
# REPORT below); the assembler's context.json carries a new build date and run id on every run.
FAKE_BAREFOOT = """#!/bin/sh
while [ $# -gt 1 ]; do
  case "$1" in --p4runtime-files) info=$2; shift;; --bf-rt-schema) bfrt=$2; shift;; -o) out=$2; shift;; esac; shift
done
mkdir -p "$out/pipe/logs"
echo "info of $1" > "$info"
runs="$(dirname "$0")/runs"; echo run >> "$runs"
fields='{"name": "a"}, {"name": "b"}'
[ $(( $(wc -l < "$runs") % 2 )) = 0 ] && fields='{"name": "b"}, {"name": "a"}'
echo '{"tables": [{"name": "pipe.snapshot.cfg", "data": ['"$fields"']}]}' > "$bfrt"
printf 'stage 0 ingress:\nstage 0 egress:\nstage 1 egress:\n' > "$out/pipe/$(basename "$1" .p4).bfa"
cp "$(dirname "$0")/report.json" "$out/pipe/logs/resources.json"
"""
FAKE_BFAS = """#!/bin/sh
[ -f "$1" ] || { echo "no assembly $1" >&2; exit 1; }
mkdir -p "$3"
echo '{"build_date": "'"$(date +%N)"'", "run_id": "'$$'", "target": "tofino", "tables": [{"name": "r",
  "direction": "egress", "table_type": "stateful", "size": 16, "alu_width": 32, "dual_width_mode": true,
  "stage_tables": [{"stage_number": 1}]}]}' > "$3/context.json"
"""
REPORT = {
    "resources": {
        "mau": {
            "nStages": 12,
            "mau_stages": [
                {
                    "stage_number": 0,
                    "logical_tables": {"ids": [{"id": 0}, {"id": 1}], "size": 16},
                    "gateways": {"gateways": [{}], "nRows": 8, "nUnits": 2},
                    "rams": {"srams": [{}, {}, {}], "nRows": 8, "nColumns": 10},
                    "map_rams": {"maprams": [], "nRows": 8, "nUnits": 6},
                    "tcams": {"tcams": [{}], "nRows": 12, "nColumns": 2},
                    "meter_alus": {"meters": [{}], "nAlus": 4},
                }
            ],
        }
    }
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "p4src" / "shared").mkdir(parents=True)
    (tmp_path / "p4src" / "v1model").mkdir()
    (tmp_path / "p4src" / "shared" / "header.p4").write_text("header h {}\n")
    (tmp_path / "p4src" / "v1model" / "prog.p4").write_text('#include "shared/header.p4"\n')
    (tmp_path / "p4src" / "programs.txt").write_text("# one program\np4src/v1model/prog.p4\n")
    return tmp_path


@pytest.fixture
def p4c(tmp_path: Path) -> Path:
    path = tmp_path / "fake-p4c-bm2-ss"
    path.write_text(FAKE_P4C)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def tofino(tmp_path: Path) -> tuple[Path, Path]:
    """(p4c-barefoot, bfas) stand-ins."""
    directory = tmp_path / "tofino-tools"
    directory.mkdir()
    (directory / "report.json").write_text(json.dumps(REPORT))
    tools = []
    for name, text in (("p4c-barefoot", FAKE_BAREFOOT), ("bfas", FAKE_BFAS)):
        path = directory / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        tools.append(path)
    return tools[0], tools[1]


def compile_all(p4c: Path, repo: Path) -> None:
    artifacts.compile_program((p4c,), repo / "p4src/v1model/prog.p4", repo / "p4src/build/prog", repo)


def test_manifest_lists_every_source_outside_the_build_directory(repo: Path, p4c: Path) -> None:
    compile_all(p4c, repo)
    assert set(artifacts.source_digests(repo)) == {"p4src/shared/header.p4", "p4src/v1model/prog.p4"}
    assert artifacts.check_sources(repo) == []


def test_changed_new_and_gone_sources_are_each_named(repo: Path, p4c: Path) -> None:
    compile_all(p4c, repo)
    (repo / "p4src/shared/header.p4").write_text("header h { bit<8> x; }\n")
    (repo / "p4src/shared/extra.p4").write_text("\n")
    assert [m.line() for m in artifacts.check_sources(repo)] == [
        "prog: changed since the artifacts were compiled: p4src/shared/header.p4",
        "prog: new since the artifacts were compiled: p4src/shared/extra.p4",
    ]
    (repo / "p4src/shared/extra.p4").unlink()
    (repo / "p4src/shared/header.p4").unlink()
    assert [m.line() for m in artifacts.check_sources(repo)] == [
        "prog: gone since the artifacts were compiled: p4src/shared/header.p4"
    ]


def test_a_missing_manifest_is_a_mismatch(repo: Path) -> None:
    [mismatch] = artifacts.check_sources(repo)
    assert mismatch.program == "prog" and "no readable p4src/build/prog/sources.json" in mismatch.problem


def test_fresh_compile_compare_names_the_differing_file(repo: Path, p4c: Path, tmp_path: Path) -> None:
    compile_all(p4c, repo)
    assert artifacts.check_compile({"compile": (p4c,)}, repo, tmp_path / "scratch") == []
    (repo / "p4src/build/prog/p4info.txtpb").write_text("edited by hand\n")
    assert [m.line() for m in artifacts.check_compile({"compile": (p4c,)}, repo, tmp_path / "scratch")] == [
        "prog: p4src/build/prog/p4info.txtpb differs from a fresh compile"
    ]


def test_a_compiler_failure_carries_its_output(repo: Path, p4c: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(artifacts.CompileError, match="syntax error"):
        compile_all(p4c, repo)


def test_the_tofino_program_is_checked_with_its_own_compilers(
    repo: Path, p4c: Path, tofino: tuple[Path, Path], tmp_path: Path
) -> None:
    (repo / "p4src/tna").mkdir()
    (repo / "p4src/tna/tng.p4").write_text('#include "shared/header.p4"\n')
    assert [m.program for m in artifacts.check_sources(repo)] == ["prog", "tng_tna"]
    compile_all(p4c, repo)
    artifacts.compile_tna_program(tofino, repo / "p4src/tna/tng.p4", repo / "p4src/build/tng_tna", repo)
    built = repo / "p4src/build/tng_tna"
    assert sorted(path.name for path in built.iterdir()) == [
        "bfrt.json",
        "context.json",
        "p4info.txtpb",
        "resources.json",
        "sources.json",
    ]
    assert artifacts.check_sources(repo) == []
    assert json.loads((built / "resources.json").read_text())["stages"] == {"ingress": 1, "egress": 2}
    # Build dates, run ids and the schema's field order change from run to run; the committed files do not.
    for _ in range(3):
        assert artifacts.check_compile({"tofino": tofino}, repo, tmp_path / "scratch") == []
    (built / "p4info.txtpb").write_text("edited by hand\n")
    # Without p4c-barefoot only the BMv2 program is compiled; with it, the edit is found.
    assert artifacts.check_compile({"compile": (p4c,)}, repo, tmp_path / "scratch") == []
    assert [m.line() for m in artifacts.check_compile({"tofino": tofino}, repo, tmp_path / "scratch")] == [
        "tng_tna: p4src/build/tng_tna/p4info.txtpb differs from a fresh compile"
    ]


def test_a_tofino_compile_that_leaves_no_resource_report_is_an_error(
    repo: Path, tofino: tuple[Path, Path], tmp_path: Path
) -> None:
    (repo / "p4src/tna").mkdir()
    (repo / "p4src/tna/tng.p4").write_text("\n")
    (tofino[0].parent / "report.json").write_text("not json")
    with pytest.raises(artifacts.CompileError, match=r"no readable .*resources\.json"):
        artifacts.compile_tna_program(tofino, repo / "p4src/tna/tng.p4", tmp_path / "out", repo)
    assert tofino_build.RESOURCES not in {path.name for path in (tmp_path / "out").iterdir()}
