"""A copy of this checkout with the input position switched off: the baseline against which
``bench_ab.py`` measures what the position costs, on the same code otherwise.

    python benchmarks/experiments/position_off.py DEST [--rev HEAD]
    python benchmarks/experiments/bench_ab.py off=DEST on=. --rounds 12 --configs 2:0,1:64,2:batch

``git worktree add --detach DEST REV``, then one edit to
``queuekit/pipelines/batching.py``: the builders' readers take
``string_input_producer``'s queue and carry no reader key, so no position is
built (nothing noted in the step, drained, or skipped). Remove the copy with
``git worktree remove --force DEST``.
"""

import argparse
import os
import subprocess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ON = """            filename_queue, position = epoch_files(
                files, opts.num_epochs, opts.shuffle, opts.seed, position_name=scope,
                fixed=fixed)
            readers = []
            for _ in range(n_readers):
                next_read, parse = read(filename_queue)
                keys, raw = reads(position, next_read, many=many)
                readers.append(dict(parse(keys, raw), **{POSITION_KEY: keys}))"""
OFF = """            filename_queue = _v1.train.string_input_producer(
                list(files), num_epochs=opts.num_epochs, shuffle=opts.shuffle, seed=opts.seed)
            readers = []
            for _ in range(n_readers):
                next_read, parse = read(filename_queue)
                readers.append(dict(parse(*next_read())))"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dest")
    ap.add_argument("--rev", default="HEAD")
    args = ap.parse_args()
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", args.dest,
                    args.rev], check=True)
    path = os.path.join(args.dest, "queuekit", "pipelines", "batching.py")
    with open(path) as f:
        text = f.read()
    if text.count(ON) != 1:
        raise SystemExit(f"{path}: the builders' reader set-up is not the one this script "
                         "knows; update ON and OFF")
    with open(path, "w") as f:
        f.write(text.replace(ON, OFF))
    print(f"{args.dest}: queuekit at {args.rev} without the input position")


if __name__ == "__main__":
    main()
