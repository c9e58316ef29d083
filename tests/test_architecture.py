"""The package's layout: imports run one way, no circles, no private names across modules."""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "queuekit"
# Lower layers never import higher ones: tools -> session/pipelines -> resume -> cluster ->
# records, features (the plug-in point) -> graph_keys -> errors (cluster's threads count
# records; records knows nothing of a cluster; the builders use resume's graph half, and a
# session loads its feature by name).
LAYERS = {"errors": 0, "version": 0, "graph_keys": 0, "graph_walk": 0, "lazy": 0,
          "signals": 0, "features": 1, "records": 1, "cluster": 2, "resume": 2.5,
          "pipelines": 3, "session": 3, "bench": 4, "demo": 4, "cli": 4, "slim": 4,
          "__init__": 5, "__main__": 5}
# A module read in one sitting. Not a target: a cap near the typical size cut modules into
# fragments (#29); this one only catches a module that grew into several.
MAX_LINES = 500


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield ".".join(("queuekit",) + parts).removesuffix(".__init__"), path


def _part(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path):
    """(imported queuekit module, imported names) for every import, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("queuekit"):
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("queuekit"):
                    yield a.name, []


GRAPH = {name: sorted({m for m, _ in _imports(path)}) for name, path in _modules()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module):
    """A module imports only lower layers, or its own part; pipelines and session stay apart."""
    here = _part(module)
    for target in GRAPH[module]:
        there = _part(target)
        assert there in LAYERS, f"{module} imports {target}: not a known part"
        assert LAYERS[there] < LAYERS[here] or there == here or (
            LAYERS[here] == 4 and LAYERS[there] == 4), f"{module} imports {target} (upward)"
        assert target != "queuekit" or module == "queuekit.__main__", (
            f"{module} imports the package itself; import the module that defines the name")


def test_no_import_cycles():
    """The module import graph has no cycle."""
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in GRAPH.get(m, []):
            if t not in GRAPH:
                continue
            assert state.get(t) != 1, "import cycle: " + " -> ".join(stack + [m, t])
            if t not in state:
                visit(t, stack + [m])
        state[m] = 2

    for m in GRAPH:
        if m not in state:
            visit(m, [])


@pytest.mark.parametrize("module,path", list(_modules()))
def test_no_private_names_across_modules_and_small_modules(module, path):
    """No module imports another's _private names, and none is over 500 lines."""
    for target, names in _imports(path):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{module} imports private {private} from {target}"
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines"


# The core of a session (queuekit.features): what every session runs. The features it runs
# are loaded by name, only for a graph that asks for them.
CORE = ["queuekit.session.queue_session", "queuekit.session.threads", "queuekit.session.policy",
        "queuekit.session.reads", "queuekit.session.runners", "queuekit.session.start",
        "queuekit.session.stall", "queuekit.session.interrupt", "queuekit.session.queue_ops"]
FEATURES = ["queuekit.session.checks", "queuekit.session.profile", "queuekit.session.report",
            "queuekit.resume.tally", "queuekit.resume.restore",
            "queuekit.resume.file", "queuekit.session.tuner",
            "queuekit.session.work_queues"]


def _module_level_imports(module: str) -> set[str]:
    path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.module for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("queuekit")}


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_feature_and_nothing_of_the_cluster(module):
    """The session's core imports none of its features and, at load, nothing of the cluster
    (a remote target's task is looked up where one is given)."""
    imported = _module_level_imports(module)
    assert not imported & set(FEATURES), f"{module} imports {imported & set(FEATURES)}"
    assert not [m for m in imported if m.startswith("queuekit.cluster")], module


def test_the_work_queue_s_threads_are_the_work_queue_feature_s_alone():
    """Only the work queue's feature imports its threads."""
    users = sorted(m for m in GRAPH if "queuekit.cluster.work_threads" in GRAPH[m])
    assert users == ["queuekit.session.work_queues"]
