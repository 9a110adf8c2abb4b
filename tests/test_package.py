"""The installable package: a wheel built from the checkout holds the data files and the `vram-planner` command,
and installed into a throwaway environment it answers from another directory (not the checkout)."""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile

import pytest
from conftest import ROOT

from planner.cli import main

DATA_FILES = {
    "planner/data/gpu_catalog.yaml",
    "planner/data/models.yaml",
    "planner/data/frameworks.yaml",
    "planner/data/accuracy.yaml",
    "planner/data/time_accuracy.yaml",
    "planner/data/serving_accuracy.yaml",
}

pytestmark = pytest.mark.package


def _run(*cmd, cwd, env=None):
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))}: {res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel of a copy of the checkout (a build in place would leave build/ and egg-info in it)."""
    pytest.importorskip("setuptools")  # the dev extra installs it; --no-build-isolation builds with this one
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "planner", src / "planner", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", out, cwd=src)
    (path,) = out.glob("vram_planner-*.whl")
    return path


def test_wheel_holds_the_package_data_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert "[console_scripts]\nvram-planner = planner.cli:main" in zf.read(entry_points).decode()
        requires = [line for line in zf.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert DATA_FILES <= names and "planner/formats/base.py" in names and "planner/memory/training.py" in names
    assert not {n for n in names if n.startswith(("tests/", "bench/", "ui/", "app.py"))}
    assert [r for r in requires if "extra ==" not in r] == ["Requires-Dist: pyyaml<7,>=6.0"]  # the planner's only


def _checkout_says(*args: str) -> str:
    """What the checkout's command prints (its main, in this process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


def test_installed_wheel_runs_from_another_directory(wheel, tmp_path):
    """Installed with --no-deps into a venv that sees this interpreter's packages (PyYAML) through a .pth file
    (--system-site-packages would show the base interpreter's, not those of a venv the tests run in), by this
    interpreter's pip (`--python`: the venv needs no pip of its own)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip()
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (tmp_path / "venv" / site).joinpath("outer.pth").write_text("\n".join(sorted(outer)) + "\n")
    # --ignore-installed: a vram-planner the outer environment has (pip install ".[dev]") must not count
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--ignore-installed",
        "-q",
        wheel,
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run(python, "-c", "import planner; print(planner.__file__)", cwd=tmp_path, env=env)
    assert where.startswith(str(env_dir))  # the installed copy, not the checkout
    models = _run(bin_dir / "vram-planner", "models", cwd=tmp_path, env=env)
    assert "llama-3.1-8b" in models
    plans = [
        p
        for p in sorted((ROOT / "examples").glob("*.yaml"))
        if "schema: vram-planner/v1\n" in p.read_text().splitlines(keepends=True)
    ]
    assert len(plans) >= 6  # examples/ holds catalogs and framework configs beside the plans
    for example in plans:
        out = _run(bin_dir / "vram-planner", "estimate", example, cwd=tmp_path, env=env)
        assert out == _checkout_says("estimate", str(example)) and "\nfits on " in out
    usage = subprocess.run(
        [bin_dir / "vram-planner", "nonsense"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2 and usage.stderr.startswith("usage: vram-planner ")
