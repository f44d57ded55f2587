"""The teaching notebooks of examples/notebooks run top to bottom without an error (nbclient), each
within two minutes, so the teaching material cannot rot. They are committed without outputs."""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "examples" / "notebooks").glob("*.ipynb"))


def test_there_are_four_notebooks():
    assert [p.name[:3] for p in NOTEBOOKS] == ["01_", "02_", "03_", "04_"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="scripts/python-test installs nbformat")
    nbclient = pytest.importorskip("nbclient", reason="scripts/python-test installs nbclient")
    pytest.importorskip("torch", reason="the training notebook needs PyTorch (CI installs it)")
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # committed without outputs
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name}: commit it without outputs"
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
