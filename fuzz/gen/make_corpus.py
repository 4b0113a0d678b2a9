#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/ (docs/testing.md). Run from the repository root:

    python3 fuzz/gen/make_corpus.py

Each target gets a few small valid inputs and damaged copies (truncated, wrong fields). Multi-file
inputs are joined with the separator of fuzz/fuzz_util.h. Encoded images come from
fuzz/gen/make_images.cpp (OpenCV), built and run here with g++. The files are committed; rerun
only to regenerate them (existing files of the same name are overwritten, others kept, so inputs
added by hand or saved from a fuzz run stay).
"""
import gzip
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SEP = b"\n--KILN-FUZZ-PART--\n"


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def config():
    small = {"name": "fz", "model": {"name": "lenet"},
             "data": {"source": "synthetic", "synthetic": {"size": 64, "height": 28, "width": 28, "channels": 1},
                      "train_transforms": [{"type": "random_crop", "size": 28, "padding": 2},
                                           {"type": "horizontal_flip"},
                                           {"type": "normalize", "mean": [0.5], "std": [0.25]}],
                      "batch_size": 16, "workers": 1},
             "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
             "schedule": {"name": "cosine", "warmup_epochs": 1},
             "train": {"epochs": 2, "seed": 3, "precision": "bf16"}}
    put("config", "synthetic.json", json.dumps(small))
    put("config", "synthetic_overrides", json.dumps(small).encode() + SEP + b"lr=0.1" + SEP + b"batch=8" + SEP +
        b"data.train_transforms.0.padding=4" + SEP + b"device=0,1" + SEP + b"optim.name=adamw")
    adamw = dict(small, optim={"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.99]},
                 schedule={"name": "multistep", "milestones": [1, 2], "gamma": 0.1})
    put("config", "adamw_multistep.json", json.dumps(adamw))
    step = dict(small, schedule={"name": "step", "step_size": 1, "gamma": 0.5},
                data={"source": "image_list", "train_list": "t.txt", "val_list": "v.txt", "channels": 3,
                      "train_transforms": [{"type": "random_resized_crop", "size": 32}, {"type": "to_tensor"}],
                      "val_transforms": [{"type": "resize", "size": 36}, {"type": "center_crop", "size": 32}]})
    put("config", "image_list_step.json", json.dumps(step))
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        with open(os.path.join(ROOT, "configs", name), "rb") as f:
            put("config", "repo_" + name, f.read())
    text = json.dumps(small)
    put("config", "truncated.json", text[: len(text) // 2])
    put("config", "duplicate_key.json", '{"train": {"epochs": 1, "epochs": 2}, "model": {"name": "lenet"}}')
    put("config", "huge_numbers", '{"train": {"seed": 18446744073709551616, "epochs": 1e30}}' + SEP.decode() +
        "batch=1e30" + SEP.decode() + "lr=1e400")
    put("config", "bad_overrides", "{}" + SEP.decode() + "=1" + SEP.decode() + "data.train_transforms.7.p=0.3" +
        SEP.decode() + "a..b=2" + SEP.decode() + "noequals")


def safetensors_file(tensors, metadata=None, pad=True):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    valid = safetensors_file({"w": ("F32", [2, 3], f32), "b": ("I64", [2], struct.pack("<2q", 7, -1)),
                              "h": ("BF16", [2], b"\x80\x3f\x00\x40"), "u": ("U8", [3], b"\x01\x02\x03")},
                             {"format": "pt", "step": "12"})
    put("safetensors", "valid.safetensors", valid)
    put("safetensors", "scalar_and_empty.safetensors",
        safetensors_file({"s": ("F64", [], struct.pack("<d", 2.5)), "e": ("F16", [0, 4], b"")}))
    put("safetensors", "truncated.safetensors", valid[: len(valid) - 5])
    put("safetensors", "overlap.safetensors",
        struct.pack("<Q", 96) + json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode().ljust(96) +
        b"\0" * 12)
    put("safetensors", "header_too_long.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    put("safetensors", "nan.safetensors", safetensors_file({"w": ("F32", [2], struct.pack("<2f", float("nan"), float("inf")))}))
    with open(os.path.join(ROOT, "tests", "data", "safetensors", "torch_tiny.safetensors"), "rb") as f:
        put("safetensors", "torch_tiny.safetensors", f.read())


def idx_file(dims, payload):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def idx():
    images = idx_file([3, 4, 5], bytes(range(60)))
    labels = idx_file([3], bytes([0, 9, 4]))
    put("idx", "valid", images + SEP + labels)
    put("idx", "valid_gz", gzip.compress(images, mtime=0) + SEP + gzip.compress(labels, mtime=0))
    put("idx", "channels", idx_file([2, 2, 2, 3], bytes(24)) + SEP + idx_file([2], bytes([1, 2])))
    put("idx", "truncated", images[:40] + SEP + labels)
    put("idx", "count_mismatch", images + SEP + idx_file([2], bytes([0, 1])))
    put("idx", "bad_label", images + SEP + idx_file([3], bytes([0, 10, 255])))
    put("idx", "huge_dims", idx_file([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], b"") + SEP + labels)
    put("idx", "gz_truncated", gzip.compress(images, mtime=0)[:30] + SEP + labels)


def cifar():
    pixels = bytes((i * 7) % 256 for i in range(3072))
    put("cifar", "cifar10_one_record", bytes([3]) + pixels)
    put("cifar", "cifar100_one_record", bytes([5, 42]) + pixels)
    put("cifar", "truncated", bytes([3]) + pixels[:1000])
    put("cifar", "bad_label", bytes([200]) + pixels)
    put("cifar", "gzip_one_record", gzip.compress(bytes([1]) + pixels, mtime=0))


def images():
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "make_images")
        cflags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "opencv4"], text=True).split()
        subprocess.check_call(["g++", "-O1", "-std=c++20", "-w", os.path.join(ROOT, "fuzz", "gen", "make_images.cpp"),
                               *cflags, "-o", exe])
        out = os.path.join(tmp, "img")
        os.makedirs(out)
        subprocess.check_call([exe, out])
        made = {n: open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))}
    for n, b in made.items():
        put("image", n, b)
    jpg = made["rgb_jpg"]
    # A header claiming 9000 x 9000 over the tiny scan (SOF0 height/width patched).
    sof = jpg.find(b"\xff\xc0")
    put("image", "jpg_huge_header", jpg[: sof + 5] + struct.pack(">HH", 9000, 9000) + jpg[sof + 9:])
    put("image", "jpg_truncated_with_eoi", made["rgb_jpg_truncated"] + b"\xff\xd9")
    png = made["rgb_png"]
    put("image", "png_bad_ihdr", png[:16] + struct.pack(">II", 0, 70000) + png[24:])
    bmp = made["rgb_bmp"]
    put("image", "bmp_bad_bitcount", bmp[:28] + struct.pack("<H", 7) + bmp[30:])
    put("image", "bmp_negative_height", bmp[:22] + struct.pack("<i", -12) + bmp[26:])
    put("image_list", "list_and_png", b"a.png 0\n# comment\n\n  a.png   3  \nsub dir/a.png 1\n" + SEP + made["rgb_png"])
    put("image_list", "list_and_jpg_crlf", b"a.png 1\r\na.png 0\r\n" + SEP + jpg)
    put("image_list", "directory_entry", b"dir.png 0\na.png 1\n" + SEP + made["grey_png"])
    put("image_list", "bad_lines", b"a.png\nb.txt 1\na.png -1\na.png 9223372036854775807\na.png x\n" + SEP + b"")
    put("image_list", "missing_and_damaged", b"missing.png 0\n/abs/x.jpg 2\na.png 1\n" + SEP + made["rgb_jpg_truncated"])


if __name__ == "__main__":
    config()
    safetensors()
    idx()
    cifar()
    images()
    print("corpus written to", CORPUS)
