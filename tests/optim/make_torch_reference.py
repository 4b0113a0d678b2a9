# Prints the PyTorch reference values pasted into tests/optim/torch_reference_test.cpp.
# Run once with a Python that has torch: /usr/bin/python3 tests/optim/make_torch_reference.py
# Inputs are built from sin/cos in double, then rounded to f32, exactly as the C++ test builds them.
import math
import torch


def param0(n):
    return [math.sin(i + 1.0) for i in range(n)]


def grad_at(n, t):
    return [math.cos(0.7 * i + t) * (t + 1) * 0.1 for i in range(n)]


def run(make_opt, n=12, steps=3, shape=(3, 4), no_decay_bias=False):
    w = torch.tensor(param0(n), dtype=torch.float32).reshape(shape).requires_grad_()
    b = torch.tensor(param0(4)[::-1], dtype=torch.float32).requires_grad_()
    groups = [{"params": [w]}, {"params": [b]}]
    if no_decay_bias:
        groups[1]["weight_decay"] = 0.0
    opt = make_opt(groups)
    for t in range(steps):
        w.grad = torch.tensor(grad_at(n, t), dtype=torch.float32).reshape(shape)
        b.grad = torch.tensor(grad_at(4, t + 10), dtype=torch.float32)
        opt.step()
    return w.detach().flatten().tolist(), b.detach().tolist()


def show(name, vals):
    w, b = vals
    print(f"// {name}")
    print("w:", ", ".join(f"{v:.9g}f" for v in w))
    print("b:", ", ".join(f"{v:.9g}f" for v in b))


print("torch", torch.__version__)
show("sgd lr=0.1 momentum=0.9 nesterov weight_decay=0.01, bias no decay",
     run(lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), no_decay_bias=True))
show("sgd lr=0.05 momentum=0.8 dampening=0.3 weight_decay=0.001",
     run(lambda g: torch.optim.SGD(g, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.001)))
show("adamw lr=0.01 betas=(0.9,0.999) eps=1e-8 weight_decay=0.1, bias no decay",
     run(lambda g: torch.optim.AdamW(g, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1), no_decay_bias=True))
show("adamw lr=0.003 betas=(0.8,0.99) eps=1e-6 weight_decay=0.05 amsgrad",
     run(lambda g: torch.optim.AdamW(g, lr=0.003, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, amsgrad=True), steps=4))

# clip_grad_norm_
w = torch.zeros(3, 4, requires_grad=True)
b = torch.zeros(4, requires_grad=True)
w.grad = torch.tensor(grad_at(12, 2), dtype=torch.float32).reshape(3, 4)
b.grad = torch.tensor(grad_at(4, 12), dtype=torch.float32)
norm = torch.nn.utils.clip_grad_norm_([w, b], max_norm=0.5)
print("// clip_grad_norm_ max_norm=0.5")
print("norm:", f"{norm.item():.9g}")
print("w:", ", ".join(f"{v:.9g}f" for v in w.grad.flatten().tolist()))
print("b:", ", ".join(f"{v:.9g}f" for v in b.grad.tolist()))

# schedules (per iteration, steps_per_epoch = 10, base lr 0.1)
spe, epochs = 10, 20
def curve(make):
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=0.1)
    s = make(o)
    out = []
    for it in range(epochs * spe):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return out
cos = curve(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=epochs * spe, eta_min=0.001))
print("// CosineAnnealingLR T_max=200 eta_min=0.001 per iteration, at 0, 37, 100, 150, 199")
print("cos:", ", ".join(f"{cos[i]:.17g}" for i in (0, 37, 100, 150, 199)))
warm = curve(lambda o: torch.optim.lr_scheduler.ChainedScheduler([
    torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=30),
    torch.optim.lr_scheduler.MultiStepLR(o, milestones=[20, 50], gamma=0.5)]))
print("// ChainedScheduler(LinearLR(0.25, 30 iters), MultiStepLR([20, 50] iters, 0.5)) at 0, 10, 25, 29, 30, 60")
print("warm:", ", ".join(f"{warm[i]:.17g}" for i in (0, 10, 25, 29, 30, 60)))
