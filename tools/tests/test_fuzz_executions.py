import json

import pytest
from fuzz_executions import executions_in, main

LOG = """#1584\tDONE   cov: 2041 ft: 2781 corp: 56/235b lim: 6 exec/s: 75 rss: 160Mb
Done 1584 runs in 21 second(s)
stat::number_of_executed_units: 1584
stat::average_exec_per_sec:     75
"""


def test_executions_come_from_the_final_stats_line():
    assert executions_in(LOG) == 1584


def test_a_log_without_final_stats_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="print_final_stats"):
        executions_in("#1 INITED cov: 3\n")


def test_runs_accumulate_per_target(tmp_path):
    table = tmp_path / "fuzz" / "executions.json"
    log = tmp_path / "run.log"
    log.write_text(LOG)
    assert main([str(table), "frames", str(log), "--seconds", "20"]) == 0
    assert main([str(table), "frames", str(log), "--seconds", "21"]) == 0
    assert main([str(table), "handshake", str(log), "--seconds", "5"]) == 0
    assert json.loads(table.read_text()) == {
        "frames": {"executions": 3168, "runs": 2, "seconds": 41.0},
        "handshake": {"executions": 1584, "runs": 1, "seconds": 5.0},
    }


def test_a_crashed_run_without_stats_records_nothing(tmp_path, capsys):
    table = tmp_path / "executions.json"
    log = tmp_path / "run.log"
    log.write_text("==1== ERROR: libFuzzer: deadly signal\n")
    assert main([str(table), "frames", str(log), "--seconds", "1"]) == 1
    assert not table.exists()
    assert "run.log" in capsys.readouterr().err
