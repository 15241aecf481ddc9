"""What ``pip install .`` installs: one import namespace, ``hoptune``, with its data files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# one test process runs them all: the module's fixture builds once (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("packaging")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, timeout=300)
    (path,) = out.glob("hoptune-*.whl")
    return path


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"hoptune"}
    for module in ("hoptune/__init__.py", "hoptune/core/__init__.py",
                   "hoptune/tasks/cli/__init__.py",
                   "hoptune/kernels/adamw.cuh", "hoptune/regions/_config.py",
                   "hoptune/tuner/_studydb.py"):
        assert module in names
    migrations = ROOT / "tuner" / "migrations"  # Alembic finds them by path: every file ships
    shipped = {f"hoptune/tuner/migrations/{p.relative_to(migrations).as_posix()}"
               for p in migrations.rglob("*") if p.suffix in (".py", ".mako")}
    assert "hoptune/tuner/migrations/versions/0001_baseline.py" in shipped
    assert shipped <= set(names)


def test_the_console_script_points_into_the_namespace(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        (entry,) = [n for n in z.namelist() if n.endswith("entry_points.txt")]
        assert "hoptune = hoptune.tasks.cli:run" in z.read(entry).decode()


def test_the_public_api() -> None:
    import hoptune

    assert set(hoptune.__all__) >= {"HoptuneError", "ConfigError", "DataError", "StoreError",
                                    "StudyError", "SchemaError", "Settings"}
    for name in hoptune.__all__:
        assert getattr(hoptune, name) is not None
    assert issubclass(hoptune.ConfigError, hoptune.HoptuneError)


def test_no_top_level_module_of_a_common_name_is_importable(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import tasks"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'tasks'" in done.stderr


def test_a_checkout_on_pythonpath_imports_without_being_installed(tmp_path: Path) -> None:
    """A GPU machine without network uses the checkout through PYTHONPATH (shared/GPU.md)."""
    code = ("import sys\n"
            "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in "
            "getattr(f, '__module__', '')]\n"
            "for name in [n for n in sys.modules if n.startswith('hoptune')]:\n"
            "    del sys.modules[name]\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "import hoptune.kernels, hoptune.tasks.cli\n"
            "print(hoptune.kernels.__file__)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "kernels" / "__init__.py")
