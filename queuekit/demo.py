"""``queuekit demo``: the whole job on generated data, end to end, in about a minute."""

from __future__ import annotations

import os
import shutil
import sys
import time

import numpy as np
from PIL import Image

CLASSES = ("circle", "square", "三角形", "stripes")


def generate_images(root, n: int, *, seed: int = 0) -> list[str]:
    """A deterministic labelled image folder: varied sizes and modes, non-ASCII names."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        cls = CLASSES[i % len(CLASSES)]
        h, w = int(rng.integers(48, 320)), int(rng.integers(48, 320))
        yy, xx = np.mgrid[0:h, 0:w]
        cy, cx, r = h / 2, w / 2, min(h, w) / 3
        if cls == "circle":
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        elif cls == "square":
            mask = (abs(yy - cy) < r) & (abs(xx - cx) < r)
        elif cls == "三角形":
            mask = (yy > cy - r) & (abs(xx - cx) < (yy - cy + r) / 2)
        else:
            mask = (xx // max(4, w // 8)) % 2 == 0
        colour = rng.integers(60, 256, 3)
        pixels = rng.integers(0, 40, (h, w, 3)) + mask[..., None] * colour
        im = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        folder = os.path.join(root, cls)
        os.makedirs(folder, exist_ok=True)
        kind = i % 10
        if kind == 7:
            path = os.path.join(folder, f"灰度_{i:04d}.png")
            im.convert("L").save(path)
        elif kind == 8:
            rgba = im.convert("RGBA")
            rgba.putalpha(Image.fromarray((mask * 255).astype(np.uint8)))
            path = os.path.join(folder, f"alpha_{i:04d}.png")
            rgba.save(path)
        elif kind == 9:
            path = os.path.join(folder, f"palette_{i:04d}.gif")
            im.convert("P").save(path)
        else:
            path = os.path.join(folder, f"图片_{i:04d}.jpg")
            im.save(path, quality=90)
        paths.append(path)
    return paths


def run_demo(workdir: str = "queuekit-demo", images: int = 600, *, bench: bool = True,
             progress: bool = True, out=None) -> int:
    from queuekit.bench import benchmark
    from queuekit.pipelines.builders import tfrecord_batches
    from queuekit.records.export import export_images
    from queuekit.records.folder import scan_image_folder
    from queuekit.records.make.writer import write_tfrecords
    from queuekit.session.queue_session import QueueSession

    def say(text):
        print(text, file=out or sys.stdout, flush=True)

    started = time.monotonic()
    workdir = os.path.abspath(workdir)
    for sub in ("images", "data", "export"):
        shutil.rmtree(os.path.join(workdir, sub), ignore_errors=True)
    img_dir = os.path.join(workdir, "images")
    generate_images(img_dir, images)
    say(f"1. generated {images} images in {len(CLASSES)} classes (RGB JPEG, grayscale, RGBA, "
        f"palette; non-ASCII names): {img_dir}")

    made = write_tfrecords(img_dir, os.path.join(workdir, "data", "demo.tfrecords"),
                              image_size=(96, 96), shards=2, progress=progress)
    say(f"2. make: {made}\n   " + "\n   ".join(made.outputs + [made.labels_path]))

    folder = scan_image_folder(img_dir)
    expected = sorted(folder.relative(i) for i in range(len(folder)))
    with QueueSession() as qs:
        batch = tfrecord_batches(made.outputs, batch_size=32, num_epochs=1, shuffle=True,
                                 seed=0, num_readers=2, allow_smaller_final_batch=True)
        seen: list[str] = []
        batches = 0
        for b in qs.iterate(batch):
            seen.extend(f.decode("utf-8") for f in b["filename"])
            batches += 1
    once = sorted(seen) == expected
    say(f"3. read one epoch with QueueSession + tfrecord_batches: {len(seen)} records in "
        f"{batches} batches, every record exactly once: {'yes' if once else 'NO'}")
    if not once:
        return 1

    exported = export_images(made.outputs[0], os.path.join(workdir, "export"),
                                progress=progress)
    say(f"4. export: {exported}")

    if bench:
        say("5. bench (a short run; `queuekit bench` for a full one):")
        report = benchmark(made.outputs, readers=(1, 2), threads=(1,), read_many=(None, "batch"),
                              seconds=1.5, repeat=1, warmup_batches=5, progress=progress)
        say("   " + report.table().replace("\n", "\n   "))
    say(f"done in {time.monotonic() - started:.0f} s; files are under {workdir}")
    return 0
