#!/usr/bin/python3
"""Golden values of cross-entropy with probability targets (kiln::ops::soft_cross_entropy,
tests/core/soft_loss_test.cpp) from PyTorch: F.cross_entropy(logits, targets, weight=w,
label_smoothing=e) with float targets, its value and its gradient to the logits, in float64.

Run: /usr/bin/python3 tests/data/golden/make_soft_ce_golden.py > tests/data/golden/soft_cross_entropy.json
(Debian's torch 1.13)."""
import json

import torch
import torch.nn.functional as F

torch.manual_seed(17)
cases = []


def add(name, logits, targets, e=0.0, weight=None):
    z = logits.clone().double().requires_grad_(True)
    w = None if weight is None else weight.double()
    loss = F.cross_entropy(z, targets.double(), weight=w, label_smoothing=e)
    loss.backward()
    cases.append({
        "name": name,
        "n": z.shape[0], "k": z.shape[1],
        "logits": z.detach().flatten().tolist(),
        "targets": targets.double().flatten().tolist(),
        "label_smoothing": e,
        "weights": None if w is None else w.tolist(),
        "loss": loss.item(),
        "grad": z.grad.flatten().tolist(),
    })


N, K = 6, 7
z = torch.randn(N, K) * 3
soft = torch.softmax(torch.randn(N, K) * 2, 1)
w = torch.rand(K) * 2 + 0.1
add("soft", z, soft)
add("soft_smoothed", z, soft, e=0.1)
add("soft_weighted", z, soft, weight=w)
add("soft_weighted_smoothed", z, soft, e=0.2, weight=w)
# A MixUp target as timm's mixup_target builds it: lam onehot(y) + (1-lam) onehot(y.flip(0)).
y = torch.randint(0, K, (N,))
lam = 0.63
mix = lam * F.one_hot(y, K).double() + (1 - lam) * F.one_hot(y.flip(0), K).double()
add("mixup", z, mix)
add("mixup_smoothed_weighted", z, mix, e=0.1, weight=w)
# A large logit range and a one-hot target (equals the class-index loss).
add("onehot_large", torch.randn(N, K) * 40, F.one_hot(y, K).double())
print(json.dumps({"generator": "tests/data/golden/make_soft_ce_golden.py", "torch": torch.__version__, "cases": cases}))
