"""README.md's code blocks are run, so the README cannot drift from the code.

- every ```python block runs as written (a fresh interpreter; PyTorch for the fp8emu.torch lines);
- the ```cpp block is the region of examples/cpp/main.cpp between its [readme] markers, verbatim:
  that program is built and run by the package tests (CTest label `package`), which check every
  value it computes against the E4M3 definition worked by hand;
- the ```sh blocks hold exactly the commands listed here, each with the test that runs it; the
  main experiment's command runs here and must give the accuracies the README's table states.
"""
import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(lang):
    return [m.group(1) for m in re.finditer(r"```" + lang + r"\n(.*?)```", README, re.S)]


def test_python_blocks_run(tmp_path):
    pytest.importorskip("torch", reason="the README's fp8emu.torch lines need PyTorch (CI installs it)")
    code = blocks("python")
    assert code, "README.md has no python block"
    for i, src in enumerate(code):
        script = tmp_path / f"readme_{i}.py"
        script.write_text(src)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert r.returncode == 0, f"README python block {i} failed:\n{src}\n{r.stdout}{r.stderr}"


def test_cpp_block_is_the_checked_example():
    (block,) = blocks("cpp")
    main = (ROOT / "examples" / "cpp" / "main.cpp").read_text()
    region = re.search(r"// \[readme\]\n(.*?)\n\s*// \[/readme\]", main, re.S)
    assert region, "examples/cpp/main.cpp lost its [readme] markers"
    assert textwrap.dedent(region.group(1)).strip() == block.strip()


# Each shell command of the README, and what runs it.
COVERED = {
    # CI's .ci/run is this command; the next test runs the experiment's train command.
    "scripts/setup && cmake --workflow --preset default && build/fp8emu train": "test_main_experiment_as_stated",
    "scripts/setup && cmake --workflow --preset test": ".ci/run",
    # The package tests (label package) install the build, then configure, build and run
    # examples/cpp against the installed prefix (tests/package/).
    "cmake --install build --prefix $HOME/.local/fp8emu": "package_install",
    "cmake -S examples/cpp -B build-example -DCMAKE_PREFIX_PATH=$HOME/.local/fp8emu": "package_find_package",
    "cmake --build build-example && build-example/fp8emu_consumer": "package_find_package",
}


def test_shell_commands_are_the_covered_ones():
    lines = [ln.strip() for b in blocks("sh") for ln in b.splitlines() if ln.strip()]
    assert sorted(lines) == sorted(COVERED), "a README command without a test: add it to COVERED with its test"


def table_row(run):
    m = re.search(r"^\| " + re.escape(run) + r" \| ([0-9.]+) \|", README, re.M)
    assert m, f"the README's results table has no row {run}"
    return float(m.group(1))


def test_main_experiment_as_stated(cli, tmp_path):
    # The quick start's `build/fp8emu train` with its defaults (10 epochs of Fashion-MNIST, FP32 and
    # FP8 delayed scaling); its accuracies are the same bits on any machine and thread count.
    data = pathlib.Path("/usr/share/datasets/fashion-mnist")
    if not data.is_dir():
        pytest.fail(f"Fashion-MNIST is not installed at {data} (scripts/setup installs dataset-fashion-mnist)")
    r = subprocess.run([str(cli), "train", "--out", str(tmp_path / "r"), "--quiet"], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    runs = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"]
    for run in ("fp32", "fp8_delayed"):
        assert round(runs[run]["test_accuracy"], 4) == table_row(run), run
