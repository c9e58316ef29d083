"""`make` images/s: the seed's makeTFRec against write_tfrecords, on the same folder, in one run.

    python benchmarks/bench_make.py [--images 600] [--repeat 3]

Images are 200-640 px RGB JPEGs (as in the issue's measurement). Prints the
median images/s of each and the ratio.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import queuekit as qk  # noqa: E402
from tests.seed import makeTFRec  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402


def photos(root, n):
    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = rng.integers(200, 641, 2)
        base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((int(w), int(h)), Image.BICUBIC)
        os.makedirs(os.path.join(root, f"c{i % 2}"), exist_ok=True)
        img.save(os.path.join(root, f"c{i % 2}", f"{i}.jpg"), quality=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--start-method", nargs="+", default=["fork", "forkserver"],
                    help="worker start methods to time (this script imports TensorFlow, so "
                         "forkserver workers import it again: see the README)")
    args = smoke.parse(ap, images=8, repeat=1, start_method=["fork"])
    with tempfile.TemporaryDirectory() as tmp:
        photos(os.path.join(tmp, "img"), args.images)
        folder = qk.scan_image_folder(os.path.join(tmp, "img"))
        seed = []
        ours: dict[str, list[float]] = {m: [] for m in args.start_method}
        for r in range(args.repeat):
            t = time.perf_counter()
            makeTFRec(folder.paths, folder.labels, out=os.path.join(tmp, f"seed{r}.tfrecords"))
            seed.append(len(folder) / (time.perf_counter() - t))
            for method in args.start_method:
                t = time.perf_counter()
                qk.write_tfrecords(folder, os.path.join(tmp, f"qk{r}.tfrecords"),
                                   workers=os.cpu_count(), progress=False, overwrite=True,
                                   start_method=method)
                ours[method].append(len(folder) / (time.perf_counter() - t))
    s = statistics.median(seed)
    print(f"seed makeTFRec:            {s:7.0f} images/s  runs {[round(x) for x in seed]}")
    for method, runs in ours.items():
        q = statistics.median(runs)
        print(f"queuekit make {method:>11}: {q:7.0f} images/s  runs {[round(x) for x in runs]}"
              f"  ratio {q / s:.2f}x")


if __name__ == "__main__":
    main()
