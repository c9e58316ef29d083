"""A command whose worker is orphaned after SIGTERM: its parent starts it and exits, as
Beam's ``sh -c`` did when the kill of that shell landed between its fork and the next look.
The worker must still end with the command.

    python orphaned_worker_job.py PID_FILE    # prints "ready"; the worker's pid goes to PID_FILE
"""

import subprocess
import sys

from queuekit.cli.program import Terminated, signals_end_the_command
from queuekit.signals import workers_end_first

MARKER = "queuekit-test-orphaned-worker"

# The middle process has no marker on its command line (it spells it in two halves), so the
# kill at the signal leaves it alone: told to go, it starts the worker, the marker on its
# command line, and exits without waiting for it.
MIDDLE = """\
import subprocess, sys
sys.stdin.readline()
marker = "queuekit-test-" + "orphaned-worker"
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open(sys.argv[1], "w").write(str(worker.pid))
"""

if __name__ == "__main__":
    with signals_end_the_command():
        try:
            with workers_end_first(MARKER):
                middle = subprocess.Popen([sys.executable, "-c", MIDDLE, sys.argv[1]],
                                          stdin=subprocess.PIPE)
                try:
                    print("ready", flush=True)
                    middle.wait()  # until SIGTERM
                finally:
                    middle.communicate(b"go\n", timeout=60)
        except Terminated as e:
            sys.exit(128 + e.signum)
