#!/usr/bin/python3
"""tests/fuzz/make_corpus.py — writes the tiny valid seed files of tests/fuzz/corpus/<target>/.

Run with Debian's python3 (PIL for the JPEGs): /usr/bin/python3 tests/fuzz/make_corpus.py
The outputs are committed; rerunning rewrites the same files.
"""
import gzip
import io
import json
import os
import struct

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def idx(type_code, shape, payload):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", s) for s in shape) + payload


# IDX: each element type, plain and gzip (mtime 0 so the bytes are stable).
u8 = idx(0x08, [2, 3, 3], bytes(range(18)))
put("idx", "u8.idx", u8)
put("idx", "u8.idx.gz", gzip.compress(u8, mtime=0))
put("idx", "labels.idx", idx(0x08, [4], bytes([0, 9, 3, 1])))
put("idx", "i32.idx", idx(0x0C, [2], struct.pack(">ii", -1, 7)))
put("idx", "f32.idx.gz", gzip.compress(idx(0x0D, [1, 2], struct.pack(">ff", 0.5, -2.0)), mtime=0))
put("idx", "f64.idx", idx(0x0E, [1], struct.pack(">d", 3.25)))
put("idx", "empty.idx", idx(0x08, [0, 28], b""))


# Images: grayscale and RGB, each format; JPEG baseline and progressive.
def image_bytes(mode, size, fmt, **kw):
    w, h = size
    img = Image.new(mode, size)
    img.putdata([((x * 40 + y * 20) % 256,) * len(mode) if mode != "L" else (x * 40 + y * 20) % 256
                 for y in range(h) for x in range(w)])
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


put("image", "gray.png", image_bytes("L", (4, 3), "PNG"))
put("image", "rgb.png", image_bytes("RGB", (3, 2), "PNG"))
put("image", "gray.jpg", image_bytes("L", (8, 8), "JPEG", quality=50))
put("image", "rgb_progressive.jpg", image_bytes("RGB", (9, 7), "JPEG", quality=50, progressive=True))
put("image", "rgb.bmp", image_bytes("RGB", (3, 2), "BMP"))
put("image", "gray.bmp", image_bytes("L", (5, 2), "BMP"))


# safetensors: two dtypes and metadata, written the way the reference writer lays them out.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "two.safetensors", safetensors(
    {"w": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), "b": ("BF16", [2], b"\x80\x3f\x00\x40")},
    {"format": "pt"}))
put("safetensors", "empty.safetensors", safetensors({"e": ("I64", [0, 3], b""), "m": ("BOOL", [3], b"\x01\x00\x01")}))
put("safetensors", "none.safetensors", safetensors({}))
