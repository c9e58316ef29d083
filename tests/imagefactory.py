"""Real image files of every kind make and export must handle, written with Pillow."""

import io
import os
import struct
import zlib

import numpy as np
from PIL import Image


def rgb(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def make_mixed_folder(root, n_per_class=3):
    """A class-per-folder tree with mixed modes and non-ASCII names; returns counts."""
    classes = {"猫": [], "dog": [], "bird": []}
    for ci, name in enumerate(classes):
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "nested"), exist_ok=True)
        for i in range(n_per_class):
            p = os.path.join(d, f"照片_{i}.jpg")
            Image.fromarray(rgb(60 + 10 * i, 80, seed=ci * 10 + i)).save(p, quality=90)
            classes[name].append(p)
    base = rgb(32, 48, seed=99)
    dog = os.path.join(root, "dog")
    Image.fromarray(base).convert("L").save(os.path.join(dog, "gray.png"))
    Image.fromarray(base).convert("LA").save(os.path.join(dog, "gray_alpha.png"))
    Image.fromarray(base).convert("P").save(os.path.join(dog, "palette.gif"))
    rgba = Image.fromarray(base).convert("RGBA")
    rgba.putalpha(128)
    rgba.save(os.path.join(dog, "rgba.png"))
    Image.fromarray(base).convert("CMYK").save(os.path.join(dog, "cmyk.jpg"))
    sixteen = (base[:, :, 0].astype(np.uint16) * 257)
    Image.fromarray(sixteen).save(os.path.join(root, "bird", "nested", "sixteen.png"))
    frames = [Image.fromarray(rgb(20, 20, seed=s)).convert("P") for s in range(3)]
    frames[0].save(os.path.join(root, "bird", "anim.gif"), save_all=True,
                   append_images=frames[1:])
    open(os.path.join(root, "notes.txt"), "w").write("not an image")  # file in root
    open(os.path.join(dog, ".hidden.jpg"), "wb").write(b"hidden")
    open(os.path.join(dog, "labels.csv"), "w").write("a,b")
    return classes


def exif_rotated_jpeg(path):
    """A 40 wide x 20 high JPEG, left half red, with EXIF orientation 6 (rotate 90 CW)."""
    a = np.zeros((20, 40, 3), np.uint8)
    a[:, :20] = (255, 0, 0)
    a[:, 20:] = (0, 0, 255)
    im = Image.fromarray(a)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(path, quality=95, exif=exif)


def bomb_png(path, side=20000):
    """A PNG whose header claims side x side pixels (the data is tiny)."""
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", side, side)
    crc = zlib.crc32(bytes(data[ihdr:ihdr + 17])) & 0xFFFFFFFF
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", crc)
    open(path, "wb").write(bytes(data))


def bad_files(folder):
    """Zero-byte, truncated, non-image and bomb files with image extensions; name -> path."""
    os.makedirs(folder, exist_ok=True)
    out = {}
    out["zero"] = os.path.join(folder, "zero.jpg")
    open(out["zero"], "wb").close()
    good = os.path.join(folder, "tmp_full.jpg")
    Image.fromarray(rgb(200, 200)).save(good, quality=90)
    data = open(good, "rb").read()
    os.unlink(good)
    out["truncated"] = os.path.join(folder, "truncated.jpg")
    open(out["truncated"], "wb").write(data[: len(data) // 2])
    out["text"] = os.path.join(folder, "text.png")
    open(out["text"], "w").write("I am not a PNG")
    out["bomb"] = os.path.join(folder, "bomb.png")
    bomb_png(out["bomb"])
    return out
