"""tng_p4.artifacts on a repository of its own: source manifests, stale-artifact detection, fresh-compile compare."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from tng_p4 import artifacts

# A stand-in for p4c-bm2-ss: writes its outputs from the source's bytes, so equal sources give equal artifacts.
FAKE_P4C = """#!/bin/sh
while [ $# -gt 1 ]; do
  case "$1" in --p4runtime-files) info=$2; shift;; -o) json=$2; shift;; esac; shift
done
[ -n "$FAIL" ] && { echo "syntax error" >&2; exit 1; }
cp "$1" "$json"; echo "info of $1" > "$info"
"""


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


def compile_all(p4c: Path, repo: Path) -> None:
    artifacts.compile_program(p4c, repo / "p4src/v1model/prog.p4", repo / "p4src/build/prog", repo)


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
    assert artifacts.check_compile({"compile": p4c}, repo, tmp_path / "scratch") == []
    (repo / "p4src/build/prog/p4info.txtpb").write_text("edited by hand\n")
    assert [m.line() for m in artifacts.check_compile({"compile": p4c}, repo, tmp_path / "scratch")] == [
        "prog: p4src/build/prog/p4info.txtpb differs from a fresh compile"
    ]


def test_a_compiler_failure_carries_its_output(repo: Path, p4c: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(artifacts.CompileError, match="syntax error"):
        compile_all(p4c, repo)


def test_the_tofino_program_is_checked_with_its_own_compiler(repo: Path, p4c: Path, tmp_path: Path) -> None:
    (repo / "p4src/tna").mkdir()
    (repo / "p4src/tna/tng.p4").write_text('#include "shared/header.p4"\n')
    assert [m.program for m in artifacts.check_sources(repo)] == ["prog", "tng_tna"]
    compile_all(p4c, repo)
    artifacts.compile_tna_program(p4c, repo / "p4src/tna/tng.p4", repo / "p4src/build/tng_tna", repo)
    assert sorted(path.name for path in (repo / "p4src/build/tng_tna").iterdir()) == ["p4info.txtpb", "sources.json"]
    assert artifacts.check_sources(repo) == []
    (repo / "p4src/build/tng_tna/p4info.txtpb").write_text("edited by hand\n")
    # Without p4c-barefoot only the BMv2 program is compiled; with it, the edit is found.
    assert artifacts.check_compile({"compile": p4c}, repo, tmp_path / "scratch") == []
    assert [m.line() for m in artifacts.check_compile({"tofino": p4c}, repo, tmp_path / "scratch")] == [
        "tng_tna: p4src/build/tng_tna/p4info.txtpb differs from a fresh compile"
    ]
