"""notebooks/04_paper_figures.py runs top to bottom under papermill, as `make figures` runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
papermill = pytest.importorskip("papermill")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "04_paper_figures.py"
PARAMS = ROOT / "configs" / "figures.json"


def test_parameter_file_matches_the_parameters_cell():
    nb = jupytext.read(NOTEBOOK)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    names = {line.split("=")[0].strip() for line in cells[0].source.splitlines() if "=" in line}
    assert set(json.loads(PARAMS.read_text())) == names


def test_notebook_executes_with_our_results(tmp_path):
    """Execute with the shipped parameter file, redirected to tmp_path and given a small results file."""
    results = tmp_path / "ours.json"
    # The shape rlvmr_nb.scoring.metrics.summarize writes: fractions, per-task success.
    results.write_text(json.dumps({"metrics": {
        "RLVMR": {lvl: {"success": 0.2, "invalid": 0.1, "repetitive": 0.05, "episode_length": 18.0,
                        "success_by_task_type": {"pick_and_place_simple": 0.4}} for lvl in ("L0", "L1", "L2")},
        "GRPO": {"L0": {"success": 0.1, "invalid": 0.3, "repetitive": 0.2}},
    }}))
    params = json.loads(PARAMS.read_text())
    params.update(out_dir=str(tmp_path / "figures"), ours_results=str(results), ours_model="SmolLM2-135M", formats=["png"])
    ipynb = tmp_path / "04_paper_figures.ipynb"
    jupytext.write(jupytext.read(NOTEBOOK), ipynb)
    executed = tmp_path / "executed.ipynb"
    papermill.execute_notebook(str(ipynb), str(executed), parameters=params, kernel_name="python3",
                               cwd=str(tmp_path), progress_bar=False)

    written = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert written == sorted([f"paper_fig{i}_vs_ours.png" for i in (1, 3, 5, 6)]
                             + [f"paper_table{i}_vs_ours.{ext}" for i in range(1, 6) for ext in ("md", "png")]
                             + ["paper_spark.png", "paper_table_spark.md", "paper_table_spark.png"])
    table1 = (tmp_path / "figures" / "paper_table1_vs_ours.md").read_text()
    assert "| *SmolLM2-135M (ours)* | *RLVMR* | *20.0* | *20.0* | *20.0* |" in table1  # fractions scaled to %
    assert "*40.0*" in (tmp_path / "figures" / "paper_table4_vs_ours.md").read_text()
    outputs = [o for c in json.loads(executed.read_text())["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 5  # Figs. 1, 3, 5, 6 and SPARK beside RLVMR
    spark_md = (tmp_path / "figures" / "paper_table_spark.md").read_text()
    assert "| Qwen2.5-1.5B-Instruct | SPARK | 80.5 | 49.2 | 15.4 | SPARK |" in spark_md and "one seed" in spark_md
    shown = " ".join(c["source"] if isinstance(c["source"], str) else "".join(c["source"])
                     for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "markdown")
    assert "Copied baselines" in shown and "One seed" in shown and "More loops than RLVMR" in shown
