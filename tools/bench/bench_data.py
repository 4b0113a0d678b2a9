#!/usr/bin/python3
"""Input-pipeline throughput, kiln vs torchvision, on the same JPEG folder in one run.

Generates (once, in --dir) an ImageFolder of --images JPEGs of --size pixels (500x375 by default,
ImageNet's typical size; quality 90) with synthetic content (smooth colour fields, edges and noise,
so that files and decoding cost are close to photographs'), then runs the ImageNet training
transforms on both sides:

    random_resized_crop(224) -> horizontal_flip -> normalize(ImageNet mean/std) -> float32 batches

  kiln         `kiln bench data` on a generated config (image_folder, --threads worker threads,
               batch --batch); it prints images/s of the loader alone.
  torchvision  ImageFolder (PIL decode) + RandomResizedCrop + RandomHorizontalFlip + ToTensor +
               Normalize in a torch DataLoader (--threads worker processes, batch --batch, shuffle),
               timed over the same number of batches after the same warm-up.

Prints images/s for both, the ratio, and images/s per core (per worker thread / process).
The machine may be shared: run it twice when figures look noisy.

Usage: /usr/bin/python3 tools/bench/bench_data.py [build/tools/kiln] [--threads 2] [--batches 40]
       [--folder ROOT]   (an existing ImageFolder root holding train/, instead of generating one)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image


def make_folder(root, n, size, classes=10, seed=0):
    train = os.path.join(root, "train")
    marker = os.path.join(root, f".done_{n}_{size[0]}x{size[1]}")
    if os.path.exists(marker):
        return train
    rng = np.random.default_rng(seed)
    w, h = size
    for i in range(n):
        c = i % classes
        d = os.path.join(train, f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        # A smooth colour field (a small random grid upscaled bicubically), a few hard edges, and
        # noise: JPEGs of 50-100 KB at this size, like photographs.
        grid = rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
        img = np.asarray(Image.fromarray(grid).resize((w, h), Image.BICUBIC), dtype=np.float32)
        for _ in range(4):
            x0, y0 = rng.integers(0, w), rng.integers(0, h)
            img[y0:y0 + rng.integers(20, 120), x0:x0 + rng.integers(20, 160)] = rng.integers(0, 256, 3)
        img += rng.normal(0, 12, size=img.shape)
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    open(marker, "w").close()
    return train


def kiln_rate(kiln, root, threads, batch, batches, warmup):
    cfg = {"data": {
        "source": "image_folder", "root": root,
        "train_transforms": [
            {"type": "random_resized_crop", "size": 224},
            {"type": "horizontal_flip"},
            {"type": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
        "val_transforms": [{"type": "center_crop", "size": 224}],
        "batch_size": batch, "workers": threads}}
    fd, path = tempfile.mkstemp(suffix=".json", prefix="kiln_bench_data_")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    out = subprocess.run([kiln, "bench", "data", path, f"threads={threads}", f"batches={batches}", f"warmup={warmup}"],
                         check=True, capture_output=True, text=True).stdout
    os.remove(path)
    return float(re.search(r"^images_per_s ([\d.]+)", out, re.M).group(1))


def torch_rate(train, threads, batch, batches, warmup):
    import torch
    from torchvision import datasets, transforms
    t = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(train, transform=t)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads,
                                         persistent_workers=True, drop_last=True)
    it = iter(loader)

    def take():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    for _ in range(warmup):
        take()
    t0 = time.perf_counter()
    images = 0
    for _ in range(batches):
        x, _ = take()
        images += x.shape[0]
    return images / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kiln", nargs="?", default="build/tools/kiln")
    ap.add_argument("--dir", default="/tmp/kiln_bench_data", help="where the generated folder goes")
    ap.add_argument("--folder", help="an existing image folder root (holding train/) instead of generating one")
    ap.add_argument("--images", type=int, default=3000)
    ap.add_argument("--size", default="500x375", help="WxH of the generated JPEGs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    size = tuple(int(v) for v in a.size.split("x"))
    t0 = time.time()
    if a.folder:
        root, train = a.folder, os.path.join(a.folder, "train")
        print(f"# folder {train}")
    else:
        root, train = a.dir, make_folder(a.dir, a.images, size)
        print(f"# folder {train}: {a.images} JPEGs of {size[0]}x{size[1]} (ready in {time.time() - t0:.0f} s)")
    print(f"# random_resized_crop(224) + horizontal_flip + normalize, batch {a.batch}, {a.threads} workers, "
          f"{a.batches} timed batches after {a.warmup}")
    k = kiln_rate(a.kiln, root, a.threads, a.batch, a.batches, a.warmup)
    tv = torch_rate(train, a.threads, a.batch, a.batches, a.warmup)
    print(f"{'pipeline':<12} {'images/s':>10} {'per core':>10}")
    print(f"{'kiln':<12} {k:>10.1f} {k / a.threads:>10.1f}")
    print(f"{'torchvision':<12} {tv:>10.1f} {tv / a.threads:>10.1f}")
    print(f"kiln/torchvision: {k / tv:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
