import os
import signal
import threading
import zlib

import pytest

# TensorFlow's C++ log lines (a warning such as "Local rendezvous is aborting", written when a
# test's session closes a queue under a blocked run) would print amid pytest's dots; set before
# any test module imports TensorFlow, and inherited by the programs the tests start.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# A shell without job control starts a background command (`cmd &`) with SIGINT ignored, and
# some CI runners do the same: the tests of Ctrl-C need Python's own handler, as a program
# run from a terminal has it (the programs the tests start reset theirs, helpers.default_signals).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_OURS = ("queuekit-", "QueueRunnerThread")


def _ours():
    return [t for t in threading.enumerate() if t.name.startswith(_OURS) and t.is_alive()]


@pytest.fixture
def id_files(tmp_path):
    """4 TFRecord files of image records whose ids count up (tests.helpers.id_image_files)."""
    from tests.helpers import id_image_files

    return id_image_files(tmp_path)


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Fail any test that leaves a queuekit or TF queue-runner thread alive."""
    before = set(_ours())
    yield
    left = [t for t in _ours() if t not in before]
    # A thread that is already finishing gets a tiny grace; a leaked one does not end.
    for t in left:
        t.join(0.5)
    alive = [t.name for t in left if t.is_alive()]
    assert not alive, f"threads left alive: {alive}"


# pytest-timeout's budget per test, before it is stretched by the machine's load: a test that
# starts processes or a cluster (marked slow) is a whole scenario, not one call.
TIMEOUT_SECS = {"fast": 120, "slow": 600}


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Give each test its timeout as it starts, stretched by the load then (helpers.patience):
    on a loaded machine a fixed budget fails healthy tests. A test's own mark wins. (A
    wrapper run first: pytest-timeout reads the mark in its own wrapper.)"""
    from tests.helpers import patience

    base = TIMEOUT_SECS["slow" if item.get_closest_marker("slow") else "fast"]
    item.add_marker(pytest.mark.timeout(patience(base)), append=True)
    yield


def pytest_addoption(parser):
    parser.addoption("--share", default=None, metavar="K/N",
                     help="run only the K-th of N shares of the tests, K from 0 (each test's "
                          "share from a hash of its id: the same on every machine); CI splits "
                          "the fast tier between two Pythons so")


def _deselect_other_shares(config, items):
    share = config.getoption("--share")
    if not share:
        return
    k, n = (int(x) for x in share.split("/"))
    keep, drop = [], []
    for item in items:
        (keep if zlib.crc32(item.nodeid.encode()) % n == k else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_collection_modifyitems(config, items):
    """Run the Beam tests last. A Beam job leaves gRPC's threads in the test process, and a
    process started after that was twice seen to abort before it ran ("Epoll1Poller ...
    epoll_wait error: Bad file descriptor", SIGABRT: a gRPC poller in the forked child);
    no other test starts a process after them."""
    _deselect_other_shares(config, items)
    items.sort(key=lambda item: item.get_closest_marker("beam") is not None)
