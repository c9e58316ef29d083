"""The package as installed: version, entry points, and the README's promises."""

import importlib.metadata
import pathlib
import subprocess
import sys

import pytest

import queuekit as qk
from queuekit.cli import main
from tests.helpers import patience, without_module

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


@pytest.mark.slow
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


@pytest.mark.parametrize("package", ["queuekit", "queuekit.records", "queuekit.cluster"])
def test_type_checkers_see_every_public_name_with_its_real_type(package):
    """A package's TYPE_CHECKING imports are exactly its _WHERE's names and modules (so a
    type checker sees real signatures: `qk.tfrecord_batches(1, 2, 3, bogus=True)` is an
    error, it was Any), and every name resolves at run time to that module's object."""
    import ast
    import importlib

    path = ROOT.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in guarded.body
            if isinstance(node, ast.ImportFrom) for alias in node.names}
    where = importlib.import_module(package)._WHERE
    assert seen == where
    for name, module in where.items():
        assert getattr(importlib.import_module(package), name) is getattr(
            importlib.import_module(module), name)


def test_the_core_is_small_and_every_earlier_name_still_resolves():
    """qk.__all__ is the core; the tools and the cluster's names are in their subpackages and,
    as before, under qk too."""
    import queuekit.cluster
    import queuekit.records

    assert len(qk.__all__) <= 20
    assert qk.write_tfrecords is queuekit.records.write_tfrecords
    assert qk.start_server is queuekit.cluster.start_server
    assert set(queuekit.records.__all__) | set(queuekit.cluster.__all__) <= set(qk._WHERE)
    with pytest.raises(AttributeError, match="no attribute 'bogus'"):
        queuekit.records.bogus  # noqa: B018


@pytest.mark.slow
def test_subpackages_are_reachable_from_the_package_alone():
    """`import queuekit as qk; qk.cluster.Shard` works in a fresh process (no import of
    queuekit.cluster by anything else), and loads no TensorFlow for the records' names."""
    code = ("import sys, queuekit as qk; print(qk.records.write_tfrecords.__name__, "
            "'tensorflow' in sys.modules, qk.cluster.Shard(0, 2).count)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["write_tfrecords", "False", "2"]


@pytest.mark.slow
def test_mypy_rejects_a_wrong_call_into_the_public_api(tmp_path):
    """mypy, where installed (the lint extra), reports a bad keyword and a wrong type, run
    from another folder: it finds queuekit through the install alone (the README's
    `pip install -e` too: a static path, not setuptools' import hook mypy cannot follow)."""
    pytest.importorskip("mypy.api")
    user = tmp_path / "user.py"
    user.write_text("import queuekit as qk\n\n"
                    "qk.tfrecord_batches('f.tfrecords', bogus=True)\n"
                    "qk.tfrecord_batches('f.tfrecords', shard=(0, 2), shard_by=3)\n"
                    "qk.QueueSession(stop_grace_secs='soon')\n"
                    "qk.tfrecord_batches('f.tfrecords', decode={'schema': 'seed'})\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "user.py", "--no-incremental",
                          "--ignore-missing-imports", "--follow-imports=silent"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=patience(600))
    out = run.stdout
    assert run.returncode == 1, out + run.stderr  # 0 where mypy saw queuekit as Any
    assert 'Unexpected keyword argument "bogus"' in out
    assert '"stop_grace_secs" to "QueueSession" has incompatible type "str"' in out
    assert '"shard_by" to "tfrecord_batches" has incompatible type "int"' in out  # typed still
    assert '"decode" to "tfrecord_batches" has incompatible type' in out
