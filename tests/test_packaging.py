"""The package as installed: version, entry points, and the README's promises."""

import importlib.metadata
import pathlib
import subprocess
import sys

import queuekit as qk
from queuekit.cli import main
from tests.helpers import without_module

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_installed_version_is_dunder_version():
    """The installed distribution's version equals queuekit.__version__."""
    assert importlib.metadata.version("queuekit") == qk.__version__


def test_all_names_exist():
    """Every name in __all__ is importable from the package."""
    assert all(hasattr(qk, name) for name in qk.__all__)


def test_version_and_help(capsys):
    """`queuekit --version` and `--help` work and exit 0."""
    assert main(["--version"]) == 0
    assert qk.__version__ in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "usage: queuekit" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli():
    """`python -m queuekit --version` runs the same CLI."""
    out = subprocess.run([sys.executable, "-m", "queuekit", "--version"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"queuekit {qk.__version__}"


def test_import_has_no_global_side_effects():
    """Importing queuekit adds no logging handler, sets no env var, keeps eager on."""
    code = ("import logging, os; env = dict(os.environ); h = list(logging.getLogger().handlers);"
            "import queuekit, tensorflow as tf;"
            "assert tf.executing_eagerly();"
            "assert logging.getLogger().handlers == h;"
            "assert dict(os.environ) == env; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_ci_runs_the_readme_test_command():
    """.ci/run calls exactly the test command the README's quick start shows."""
    readme = (ROOT / "README.rst").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line.strip() for line in readme.splitlines() if "pytest" in line
                   and "venv" in line)
    assert command in ci


def test_tensorflow_is_an_extra_not_a_requirement():
    """Installing queuekit beside the user's own TensorFlow adds no second TensorFlow."""
    requires = importlib.metadata.requires("queuekit") or []
    tf_reqs = [r for r in requires if r.lower().startswith("tensorflow")]
    assert tf_reqs and all("extra ==" in r for r in tf_reqs), tf_reqs
    extras = {r.split("extra ==")[1].strip(" '\"") for r in tf_reqs}
    assert extras == {"cpu", "gpu"}


def test_without_tensorflow_the_first_name_used_names_the_extra():
    """With no TensorFlow importable, the first queuekit name used says which extra to install."""
    code = (without_module("tensorflow") +
            "import queuekit\n"
            "queuekit.QueueSession\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert "pip install 'queuekit[cpu]'" in out.stderr and "queuekit[gpu]" in out.stderr


def test_version_does_not_load_tensorflow():
    """`queuekit --version` answers without importing TensorFlow."""
    code = ("import sys; from queuekit.cli import main; main(['--version']); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split()[-1] == "False"
