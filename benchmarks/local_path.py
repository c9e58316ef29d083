"""What the local path runs: from ``tfrecord_batches(...)`` to the first batch and close.

Counts the queuekit files whose code runs on that path (and the lines of those
files, and the lines that ran, per file), and those of them a function of which
ran (not only their import), how often each input file is opened (``strace``,
where the machine has it: TensorFlow's readers open files in C++) and how often
its record headers are walked (``records.tfrecord.walk``, counted in Python)::

    python benchmarks/local_path.py [--files 4] [--readers 1]

Prints one JSON line; ``--smoke`` runs it at the smallest size (the CI's smoke test).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import collections, json, os, sys, threading
import numpy as np
import tensorflow as tf
import queuekit as qk
from queuekit.records import files as record_files, tfrecord

files, readers = json.loads(sys.argv[1]), sys.argv[2]
readers = readers if readers == "auto" else int(readers)
package = os.path.dirname(qk.__file__) + os.sep
ran = collections.defaultdict(set)
walks = collections.Counter()
# The walk of a file's headers (before d0a5d98: check_framing, called once per walk).
walked = record_files if hasattr(record_files, "walk") else tfrecord
name = "walk" if walked is record_files else "check_framing"
walk = getattr(walked, name)

def counted(path, *a, **k):
    walks[path] += 1
    return walk(path, *a, **k)

setattr(walked, name, counted)

called = collections.defaultdict(set)  # lines run by functions, not by module bodies

def tracer(frame, event, arg):
    if frame.f_code.co_filename.startswith(package):
        ran[frame.f_code.co_filename].add(frame.f_lineno)
        if frame.f_code.co_name != "<module>":
            called[frame.f_code.co_filename].add(frame.f_lineno)
        return tracer
    return None

print("START", flush=True)
threading.settrace(tracer)
sys.settrace(tracer)
with qk.QueueSession() as qs:
    batch = qk.tfrecord_batches(files, batch_size=4, num_readers=readers, num_epochs=1)
    qs.run(batch)
sys.settrace(None)
threading.settrace(None)
print("END", flush=True)
lines = {f: sum(1 for _ in open(f)) for f in ran}
print(json.dumps({"files": len(ran), "lines_of_those_files": sum(lines.values()),
                  "lines_run": sum(len(v) for v in ran.values()),
                  # files a function of which ran (not only their import), and their lines
                  "files_called": len(called),
                  "lines_of_files_called": sum(lines[f] for f in called),
                  "header_walks": dict(walks),
                  "by_file": {os.path.relpath(f, package): [lines[f], len(ran[f])]
                              for f in sorted(ran)}}))
"""


def _write(folder: pathlib.Path, n_files: int) -> list[str]:
    import numpy as np
    import tensorflow as tf

    from queuekit.records.encode import make_example
    paths = []
    for i in range(n_files):
        path = folder / f"part-{i}.tfrecords"
        with tf.io.TFRecordWriter(str(path)) as w:
            for j in range(16):
                pixels = np.full((4, 6, 3), j, np.uint8).tobytes()
                w.write(make_example(pixels, label=j % 3, height=4, width=6, fmt="raw",
                                     label_text="c", filename=f"{i}-{j}"))
        paths.append(str(path))
    return paths


def measure(n_files: int, readers: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        files = _write(pathlib.Path(tmp), n_files)
        cmd = [sys.executable, "-c", CHILD, json.dumps(files), readers]
        strace = shutil.which("strace")
        log = pathlib.Path(tmp) / "strace.log"
        if strace:
            cmd = [strace, "-f", "-qq", "-e", "trace=open,openat", "-o", str(log)] + cmd
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True,
                             timeout=600).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["header_walks"] = {os.path.basename(k): v
                                  for k, v in result["header_walks"].items()}
        if strace:
            opens: collections.Counter[str] = collections.Counter()
            for line in log.read_text().splitlines():
                for f in files:
                    if f'"{f}"' in line and "ENOENT" not in line:
                        opens[os.path.basename(f)] += 1
            result["opens"] = dict(opens)
        return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--readers", default="1")
    parser.add_argument("--smoke", action="store_true", help="the smallest size")
    args = parser.parse_args(argv)
    print(json.dumps(measure(1 if args.smoke else args.files, args.readers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
