#!/usr/bin/python3
"""Converts torchvision / timm weights to a safetensors file that kiln's train.init (and eval's weights=) loads.

    /usr/bin/python3 tools/convert_weights.py IN.pth OUT.safetensors [--model resnet18] [--num-classes N]

IN is what torch.save wrote: a state dict, a full pickled model (nn.Module), or a training checkpoint
holding one under "state_dict", "model", "model_state_dict" or "state_dict_ema". kiln reads PyTorch's
layouts and torchvision's names (layers/interop.h), so the tensors are written as they are, after:
  - the wrappers' prefixes are removed: "module." (DataParallel, DDP), "_orig_mod." (torch.compile);
  - floating tensors become float32 (kiln's master weights; an f16/bf16 file would be widened anyway),
    integer ones int64 (num_batches_tracked, which kiln keeps as torch does).
timm's ResNets use torchvision's names; other timm models are written as they are and kiln's
train.init names what does not fit.

--model NAME checks the result against torchvision.models.NAME (built without weights, nothing is
downloaded), i.e. against kiln's registry model of that name (resnet18/34/50/101/152, alexnet, vgg11/13/16/19,
whose names and PyTorch shapes are torchvision's): every name and shape must match except the classifier
head's shape (fc / classifier.6, which train.init re-initialises when num_classes differs). Exit status 1
when they do not. Needs torch (and torchvision for --model): Debian's python3-torch is enough.
docs/finetune.md describes the whole fine-tuning workflow.
"""
import argparse
import json
import os
import struct
import sys

import torch

WRAPPER_PREFIXES = ("module.", "_orig_mod.")
CHECKPOINT_KEYS = ("state_dict", "model", "model_state_dict", "state_dict_ema")


def state_dict_of(obj, path):
    """The tensors of what torch.load returned: a module, a state dict, or a checkpoint that holds one."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in CHECKPOINT_KEYS:
            if key in obj:
                return state_dict_of(obj[key], f"{path}[{key!r}]")
    raise SystemExit(f"{path}: not a state dict, a model or a checkpoint with one of {', '.join(CHECKPOINT_KEYS)} "
                     f"(found {type(obj).__name__}{' with keys ' + ', '.join(map(str, list(obj)[:8])) if isinstance(obj, dict) else ''})")


def kiln_names(sd):
    """torchvision/timm names -> kiln's (the same, less the wrappers' prefixes), tensors as kiln loads them."""
    out = {}
    for name, t in sd.items():
        for p in WRAPPER_PREFIXES:
            while name.startswith(p):
                name = name[len(p):]
        t = t.detach().cpu()
        t = t.to(torch.float32) if t.is_floating_point() else t.to(torch.int64)
        if name in out:
            raise SystemExit(f"two tensors map to the name {name!r}")
        out[name] = t.contiguous()
    return out


def save_safetensors(tensors, path, metadata):
    """The safetensors format: u64 header size, a JSON header (dtype, shape, byte offsets), the raw bytes."""
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = t.numpy().tobytes()  # little-endian on every machine kiln runs on
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def check_against(tensors, model_name, num_classes):
    """Compares names and shapes with torchvision.models.<model_name>; returns the problems."""
    import torchvision
    ctor = getattr(torchvision.models, model_name, None)
    if ctor is None or not callable(ctor):
        raise SystemExit(f"--model {model_name}: torchvision.models has no such model; kiln's registry models with "
                         "torchvision's names: resnet18, resnet34, resnet50, resnet101, resnet152, alexnet, vgg11, "
                         "vgg13, vgg16, vgg19")
    ref = ctor(num_classes=num_classes).state_dict()
    linears = [n for n, m in ctor(num_classes=num_classes).named_modules() if isinstance(m, torch.nn.Linear)]
    head = linears[-1] if linears else None
    problems = []
    for name, t in ref.items():
        is_head = head is not None and name.startswith(head + ".")
        if name not in tensors:
            problems.append(f"{name} missing")
        elif tuple(tensors[name].shape) != tuple(t.shape) and not is_head:
            problems.append(f"{name}: {tuple(tensors[name].shape)} in the file, {tuple(t.shape)} in {model_name}")
    extra = [n for n in tensors if n not in ref]
    problems += [f"{n}: not in {model_name}" for n in extra]
    return problems, head


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="a .pth/.pt file written by torch.save")
    ap.add_argument("output", help="the .safetensors file to write")
    ap.add_argument("--model", help="check the names and shapes against torchvision.models.MODEL (kiln's registry model)")
    ap.add_argument("--num-classes", type=int, default=1000, help="num_classes of the --model check (default 1000)")
    a = ap.parse_args(argv)
    try:
        obj = torch.load(a.input, map_location="cpu")
    except Exception as e:  # a pickle of something else, a truncated file, a class that is not importable
        raise SystemExit(f"{a.input}: torch.load failed ({type(e).__name__}: {e}); accepted: a file written by "
                         "torch.save (a state dict, a model, or a checkpoint holding one)")
    tensors = kiln_names(state_dict_of(obj, a.input))
    if a.model:
        problems, head = check_against(tensors, a.model, a.num_classes)
        if problems:
            print(f"{a.input} does not match {a.model}:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print(f"names and shapes match torchvision's {a.model} (head {head})")
    save_safetensors(tensors, a.output, {"format": "pt", "source": os.path.basename(a.input),
                                         "converter": "kiln tools/convert_weights.py"})
    n = sum(t.numel() for t in tensors.values())
    print(f"wrote {a.output}: {len(tensors)} tensors, {n} values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
