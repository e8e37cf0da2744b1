"""What a finished run leaves in its directory: results.json, the plots and summary.md."""

from __future__ import annotations

from pathlib import Path

from tng_lab.plots import plot_all
from tng_lab.results import LabResults, write_json, write_summary


def write_run(results: LabResults, out_dir: Path) -> tuple[Path, Path, list[Path]]:
    """Writes results.json, the plots and summary.md into `out_dir`; returns (results.json, summary.md, plots)."""
    plots = plot_all(results, out_dir)
    results_file = write_json(results, out_dir / "results.json")
    summary = write_summary(results, plots, out_dir / "summary.md")
    return results_file, summary, plots
