"""JPEG decode in the reader threads: queuekit vs the same decode in tf.data, one run.

    python benchmarks/bench_decode.py [--records 600] [--seconds 4] [--rounds 3]

Writes --records JPEGs of 200-500 px a side (smooth gradients plus noise, quality
90) in the Inception/Slim ``build_image_data.py`` layout, then measures records/s
of decode + resize to 224x224 + batch of 32 + the seed's normalisation, the batch
consumed in the graph (a reduce_sum) by a v1 Session, for:

- queuekit ``tfrecord_batches`` (layout detected, ``image_size=224``) with 1 and 2
  readers, with ``dct_method="INTEGER_FAST"`` (not bit-exact), and 2 readers of two
  threads reading whole batches (``read_many="batch"``: each read decodes a batch);
- tf.data: ``TFRecordDataset`` -> ``map`` (parse, ``decode_jpeg``, the same resize,
  ``num_parallel_calls=AUTOTUNE``) -> ``batch`` -> the same one-pass normalisation
  -> ``prefetch``, in a ``tf.Graph`` with a one-shot iterator.

Each measurement runs in its own process; the configurations are interleaved
over --rounds rounds and a row's rate is the median of its rounds.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import smoke  # noqa: E402

CONFIGS = {
    "queuekit readers=1": {"kind": "queuekit", "readers": 1},
    "queuekit readers=2": {"kind": "queuekit", "readers": 2},
    "queuekit readers=2 INTEGER_FAST": {"kind": "queuekit", "readers": 2,
                                        "dct": "INTEGER_FAST"},
    "queuekit readers=2 threads=2 read_many=batch": {"kind": "queuekit", "readers": 2,
                                                     "threads": 2, "read_many": "batch"},
    "tf.data AUTOTUNE": {"kind": "tfdata"},
}
SIZE = 224
BATCH = 32


def write_dataset(folder: str, n: int) -> list[str]:
    """Inception-layout shards of JPEGs 200-500 px a side."""
    rng = np.random.default_rng(0)
    paths = [os.path.join(folder, f"train-{k:05d}-of-00004") for k in range(4)]
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(p, "wb")) for p in paths]
        _write_jpegs(files, n, rng)
    return paths


def _write_jpegs(files, n, rng) -> None:
    import io

    from PIL import Image

    from queuekit.records.encode import encode_example
    from queuekit.records.tfrecord import frame

    for i in range(n):
        h, w = (int(v) for v in rng.integers(200, 501, 2))
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], -1)
        pixels = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        files[i % 4].write(frame(encode_example({
            "image/height": h, "image/width": w, "image/colorspace": b"RGB",
            "image/channels": 3, "image/class/label": 1 + i % 5,
            "image/class/text": b"class%d" % (i % 5), "image/format": b"JPEG",
            "image/filename": b"%d.jpg" % i, "image/encoded": buf.getvalue()})))


def measure(config: dict, files: list[str], seconds: float) -> float:
    """Records/s of one configuration, after two warm-up batches."""
    import tensorflow as tf

    import queuekit as qk
    from queuekit.pipelines.delivery import normalized

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        if config["kind"] == "queuekit":
            batch = qk.tfrecord_batches(files, batch_size=BATCH, num_readers=config["readers"],
                                        num_threads=config.get("threads", 1),
                                        read_many=config.get("read_many"),
                                        decode=qk.Decode(image_size=SIZE,
                                                         dct_method=config.get("dct", "")))
            step = tf.reduce_sum(batch["image"])
            qs = qk.QueueSession()
            run = qs.run
        else:
            spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                    "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

            def parse(serialized):
                feats = tf.io.parse_single_example(serialized, spec)
                image = tf.image.resize(tf.io.decode_jpeg(feats["image/encoded"], 3),
                                        (SIZE, SIZE), antialias=True)
                image = tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)
                return image, tf.cast(feats["image/class/label"] - 1, tf.int32)

            ds = (tf.data.TFRecordDataset(files).repeat()
                  .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
                  .map(lambda im, lb: (normalized(im), lb))
                  .prefetch(tf.data.AUTOTUNE))
            image, _ = v1.data.make_one_shot_iterator(ds).get_next()
            step = tf.reduce_sum(image)
            qs = v1.Session()
            run = qs.run
        with qs:
            for _ in range(2):
                run(step)
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                run(step)
                n += BATCH
            return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=600)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"which of {', '.join(CONFIGS)} (comma-separated)")
    args = smoke.parse(ap, records=12, seconds=0.2, rounds=1,
                       configs="queuekit readers=1,tf.data AUTOTUNE")
    if args.child:
        print(json.dumps(measure(CONFIGS[args.child], args.files, args.seconds)))
        return
    rates: dict[str, list[float]] = {name: [] for name in args.configs.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        files = write_dataset(tmp, args.records)
        for r in range(args.rounds):
            for name in rates:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds),
                     "--files", *files], capture_output=True, text=True, check=True,
                    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
                rates[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1} {name}: {rates[name][-1]:.0f} rec/s", file=sys.stderr)
    tfdata = rates.get("tf.data AUTOTUNE")
    ref = statistics.median(tfdata) if tfdata else float("nan")
    print(f"{'configuration':34s} {'rec/s':>8s} {'vs tf.data':>10s}  rounds")
    for name, values in rates.items():
        mid = statistics.median(values)
        print(f"{name:34s} {mid:8.0f} {mid / ref:9.2f}x  {[round(v) for v in values]}")
    print(f"({os.cpu_count()} cores, {args.records} JPEGs of 200-500 px, resized to "
          f"{SIZE}x{SIZE}, batches of {BATCH})")


if __name__ == "__main__":
    main()
