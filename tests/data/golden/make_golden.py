#!/usr/bin/python3
"""Generates the PyTorch reference fixtures of tests/models/golden_test.cpp and models_test.cpp.

Run once with the system python that has torch (1.13): /usr/bin/python3 tests/data/golden/make_golden.py
Writes, next to this script:
  resnet_cifar_a.json, resnet_cifar_b.json, custom_layers.json
      a small network's kiln config, weights and buffers (PyTorch layout), an input (NCHW), labels,
      eval-mode logits, train-mode logits, cross-entropy loss, every parameter's gradient and the
      buffers after the training forward.
  torchvision_names.json
      for a few models, the state-dict names and PyTorch shapes in order, and parameter counts of
      every model, from the definitions below (which mirror torchvision's ResNet, AlexNet and VGG,
      and He et al.'s CIFAR ResNet with shortcut A or B).
Numbers are written with 9 significant digits (exact for float32).
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


# --- model definitions (torchvision layouts) --------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, shortcut="B"):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        self.option_a = None
        if stride != 1 or inplanes != planes:
            if shortcut == "B":
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
            else:
                extra = planes - inplanes
                self.option_a = (stride, extra // 2, extra - extra // 2)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x
        if self.downsample is not None:
            identity = self.downsample(x)
        elif self.option_a is not None:
            s, before, after = self.option_a
            identity = F.pad(x[:, :, ::s, ::s], (0, 0, 0, 0, before, after))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, shortcut="B"):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, widths, num_classes, cifar, shortcut="B"):
        super().__init__()
        stem = widths[0]
        if cifar:
            self.conv1 = nn.Conv2d(3, stem, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, stem, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU()
        self.maxpool = None if cifar else nn.MaxPool2d(3, 2, 1)
        inplanes = stem
        for i, (n, w) in enumerate(zip(layers, widths)):
            blocks = []
            for b in range(n):
                blocks.append(block(inplanes, w, 2 if (i > 0 and b == 0) else 1, shortcut))
                inplanes = w * block.expansion
            setattr(self, "layer%d" % (i + 1), nn.Sequential(*blocks))
        self.nstages = len(layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        for i in range(self.nstages):
            x = getattr(self, "layer%d" % (i + 1))(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_imagenet(depth):
    layers = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
    return ResNet(BasicBlock if depth < 50 else Bottleneck, layers, [64, 128, 256, 512], 1000, False)


def resnet_cifar(depth, width=16, shortcut="A", num_classes=10):
    n = (depth - 2) // 6
    return ResNet(BasicBlock, [n, n, n], [width, 2 * width, 4 * width], num_classes, True, shortcut)


class AlexNet(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Dropout(), nn.Linear(9216, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes))


VGG_CFG = {11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
           13: [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
           16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
           19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]}


class VGG(nn.Module):
    def __init__(self, depth, bn, num_classes=1000):
        super().__init__()
        layers, c = [], 3
        for v in VGG_CFG[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers.append(nn.Conv2d(c, v, 3, padding=1))
                if bn:
                    layers.append(nn.BatchNorm2d(v))
                layers.append(nn.ReLU())
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(nn.Linear(25088, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096),
                                        nn.ReLU(), nn.Dropout(), nn.Linear(4096, num_classes))



class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                                      nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(64), nn.MaxPool2d(2), nn.ReLU())
        self.classifier = nn.Sequential(nn.Linear(64 * 49, 128), nn.ReLU(), nn.Dropout(), nn.Linear(128, 10))


# --- helpers ---------------------------------------------------------------------------------
def num(x):
    return float("%.9g" % x)


def tensor_json(t):
    t = t.detach().contiguous()
    if t.dtype == torch.int64:
        return {"shape": list(t.shape), "data": [int(v) for v in t.reshape(-1).tolist()]}
    return {"shape": list(t.shape), "data": [num(v) for v in t.reshape(-1).tolist()]}


def randomize_bn(model):
    # Non-trivial BN parameters and statistics, so that eval mode tests something.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def golden(model, config, x, labels, path):
    out = {"model": config}
    out["state_dict"] = {k: tensor_json(v) for k, v in model.state_dict().items()}
    out["input"] = tensor_json(x)
    out["labels"] = labels.tolist()
    model.eval()
    with torch.no_grad():
        out["logits_eval"] = tensor_json(model(x))
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    out["logits"] = tensor_json(logits)
    out["loss"] = num(loss.item())
    out["grads"] = {k: tensor_json(p.grad) for k, p in model.named_parameters()}
    out["buffers_after"] = {k: tensor_json(b) for k, b in model.named_buffers()}
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes")


def custom_net():
    # conv -> BN -> ReLU -> LRN -> maxpool -> grouped dilated conv -> ReLU -> avgpool -> flatten -> linear -> ReLU -> linear
    layers = [
        {"type": "conv2d", "in_channels": 3, "out_channels": 6, "kernel_size": 3, "padding": 1},
        {"type": "batch_norm2d", "num_features": 6},
        {"type": "relu"},
        {"type": "local_response_norm", "size": 3, "alpha": 0.01, "beta": 0.75, "k": 2.0},
        {"type": "max_pool2d", "kernel_size": 2},
        {"type": "conv2d", "in_channels": 6, "out_channels": 8, "kernel_size": 3, "padding": 2, "dilation": 2,
         "groups": 2},
        {"type": "relu"},
        {"type": "avg_pool2d", "kernel_size": 2},
        {"type": "flatten"},
        {"type": "linear", "in_features": 72, "out_features": 10},
        {"type": "relu"},
        {"type": "linear", "in_features": 10, "out_features": 5},
    ]
    net = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.LocalResponseNorm(3, 0.01, 0.75, 2.0),
        nn.MaxPool2d(2), nn.Conv2d(6, 8, 3, padding=2, dilation=2, groups=2), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(72, 10), nn.ReLU(), nn.Linear(10, 5))
    return net, {"layers": layers}


def names_fixture(path):
    out = {"names": {}, "counts": {}}
    named = {
        "resnet18": resnet_imagenet(18), "resnet50": resnet_imagenet(50), "alexnet": AlexNet(),
        "vgg11_bn": VGG(11, True), "resnet20": resnet_cifar(20), "lenet": LeNet(),
    }
    for name, m in named.items():
        out["names"][name] = [[k, list(v.shape)] for k, v in m.state_dict().items()]
    counts = dict((k, sum(p.numel() for p in m.parameters())) for k, m in named.items())
    for d in (34, 101, 152):
        counts["resnet%d" % d] = sum(p.numel() for p in resnet_imagenet(d).parameters())
    for d in (11, 13, 16, 19):
        for bn in (False, True):
            counts["vgg%d%s" % (d, "_bn" if bn else "")] = sum(p.numel() for p in VGG(d, bn).parameters())
    for d in (32, 44, 56, 110):
        counts["resnet%d" % d] = sum(p.numel() for p in resnet_cifar(d).parameters())
    out["counts"] = counts
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print("wrote", path, os.path.getsize(path), "bytes", counts)


def main():
    torch.manual_seed(20240601)
    for shortcut, width in (("A", 4), ("B", 2)):
        net = resnet_cifar(8, width, shortcut, num_classes=10)
        randomize_bn(net)
        config = {"name": "resnet_cifar", "depth": 8, "width": width, "shortcut": shortcut, "num_classes": 10}
        x = torch.randn(2, 3, 16, 16)
        labels = torch.tensor([3, 7])
        golden(net, config, x, labels, os.path.join(HERE, "resnet_cifar_%s.json" % shortcut.lower()))
    net, config = custom_net()
    randomize_bn(net)
    x = torch.randn(2, 3, 12, 12)
    labels = torch.tensor([1, 4])
    golden(net, config, x, labels, os.path.join(HERE, "custom_layers.json"))
    names_fixture(os.path.join(HERE, "torchvision_names.json"))


if __name__ == "__main__":
    main()
