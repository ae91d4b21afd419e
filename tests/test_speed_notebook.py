"""examples/speed.ipynb executes on the committed results (a Jupyter kernel runs every cell)."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat, nbclient, ipykernel")
nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbformat, nbclient, ipykernel")

ROOT = Path(__file__).resolve().parents[1]


def test_speed_notebook_executes():
    nb = nbformat.read(ROOT / "examples" / "speed.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "runs," in text
    if not list((ROOT / "eval" / "results" / "h200").glob("tpot*/tpot.json")):
        assert "No GPU TPOT results are committed yet" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 3
