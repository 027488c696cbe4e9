#!/usr/bin/python3
"""bench/torch_suite.py — the PyTorch half of bench/suite.sh: the same measurements as
train_throughput.cpp (table (a)) and bench_layers (table (b)), plus a Python-level per-op
overhead (table (c)'s fallback when libtorch's C++ benchmark cannot be built). Each subcommand
writes one JSON file that bench/suite_report.py reads.

  /usr/bin/python3 bench/torch_suite.py throughput --model smallcnn --threads 2 --json out.json
  /usr/bin/python3 bench/torch_suite.py layers --threads 2 --json layers.json
  /usr/bin/python3 bench/torch_suite.py op-overhead --json op.json

Throughput follows train_throughput.cpp's protocol exactly: the first warmup + windows x steps
batches of epoch 0 of mixtape's DataLoader order (seed 0, reimplemented in
torch_fashion_mnist.py), normalised with the same float32 operations and prepared before timing;
SGD lr 0.05 momentum 0.9, cross entropy; autocast around forward + loss; median window and the
min..max of the windows. torch 1.13 has CPU autocast for bf16 only, so fp16 is reported as n/a.
Layers: the shapes and dtypes of bench/layers.cpp; each repetition times a number of iterations
calibrated to ~0.1 s; the figure is the median repetition, the spread its min..max. Timings are
taken in Python, so each includes PyTorch's Python binding overhead (a few µs per call) — small
against a layer's hundreds of µs, but it is labelled as Python wherever it is reported.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_fashion_mnist as tfm  # noqa: E402  (the shared model, data and sample order)

BATCH = 128


# ---- models ----------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    """models/zoo/resnet.cpp's BasicBlock: conv3x3-BN-ReLU-conv3x3-BN + (1x1 conv-BN) shortcut."""

    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    """models/zoo/resnet.cpp's CIFAR ResNet (depth 6n + 2), 1 input channel, 16/32/64 planes."""

    def __init__(self, depth=8, classes=10, in_channels=1):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, inp = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                layers.append(BasicBlock(inp, planes, stride if i == 0 else 1))
                inp = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def make_model(name):
    torch.manual_seed(0)
    if name == "smallcnn":
        return tfm.SmallCNN()
    if name == "resnet8":
        return ResNet(8)
    sys.exit(f"torch_suite: unknown --model {name} (smallcnn, resnet8)")


# ---- (a) throughput --------------------------------------------------------------------------

def make_batches(a, need):
    if not a.synthetic:
        try:
            x, y = tfm.load(a.data, "train", 0)
            order = np.asarray(tfm.epoch_order(len(x), 0, 0))
            out = []
            for s in range(min(need, len(x) // BATCH)):
                idx = order[s * BATCH:(s + 1) * BATCH]
                out.append((tfm.normalize(x[idx]), torch.from_numpy(y[idx])))
            return out, "Fashion-MNIST train, epoch 0 order (seed 0)"
        except SystemExit as e:  # tfm.load exits with a message when the files are missing
            print(f"torch_suite: {e}; using synthetic batches", file=sys.stderr)
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 1, 28, 28, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(need)], "synthetic randn (seeded)"


def throughput(a):
    need = a.warmup + a.windows * a.steps
    batches, source = make_batches(a, need)
    result = {"framework": f"torch {torch.__version__}", "model": a.model, "batch": BATCH,
              "threads": torch.get_num_threads(), "data": source, "warmup": a.warmup, "windows": a.windows,
              "steps": a.steps, "modes": {}}
    print(f"torch {torch.__version__} {a.model}, batch {BATCH}, {torch.get_num_threads()} threads, {source}; "
          f"{a.warmup} warm-up steps, median of {a.windows} windows x {a.steps} steps", flush=True)
    for mode in a.modes.split(","):
        if mode == "fp16":
            result["modes"][mode] = {"na": "no CPU fp16 autocast in torch 1.13"}
            print("fp16   n/a (no CPU fp16 autocast in torch 1.13)", flush=True)
            continue
        model = make_model(a.model)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        nxt = [0]

        def step():
            x, y = batches[nxt[0] % len(batches)]
            nxt[0] += 1
            opt.zero_grad(set_to_none=True)  # mixtape's zero_grad() default; torch 1.13's is False
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        for _ in range(a.warmup):
            step()
        ips = []
        for _ in range(a.windows):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            ips.append(a.steps * BATCH / (time.perf_counter() - t0))
        s = sorted(ips)
        med = s[len(s) // 2]  # as train_throughput.cpp: the upper middle for an even count
        result["modes"][mode] = {"images_per_s": med, "min": s[0], "max": s[-1], "windows": ips,
                                 "step_ms": 1e3 * BATCH / med}
        print(f"{mode:6} {med:12.1f} ({s[0]:.1f}..{s[-1]:.1f})  step {1e3 * BATCH / med:.1f} ms", flush=True)
    return result


# ---- (b) layers ------------------------------------------------------------------------------

def make_layer(name, dtype):
    """bench/layers.cpp's make_layer: the layer and the input it sees in training."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    act = dtype or torch.float32

    def inp(shape, dt, grad):
        return torch.randn(*shape, generator=g).to(dt).requires_grad_(grad)

    if name in ("conv1", "conv2"):
        first = name == "conv1"
        m = nn.Conv2d(1 if first else 32, 32 if first else 64, 3, padding=1)
        x = inp((BATCH, 1, 28, 28), torch.float32, False) if first else inp((BATCH, 32, 14, 14), act, True)
        return list(m.parameters()), x, m
    if name == "fc1":
        m = nn.Linear(3136, 128)
        return list(m.parameters()), inp((BATCH, 3136), act, True), m
    if name == "pool":
        return [], inp((BATCH, 32, 28, 28), act, True), lambda x: F.max_pool2d(x, 2)
    t = torch.randint(0, 10, (BATCH,), generator=g)
    return [], inp((BATCH, 10), act, True), lambda x: F.cross_entropy(x, t)


def time_fn(fn, reps, target_s):
    """Median, min, max seconds per call over `reps` repetitions of a calibrated count."""
    fn()  # warm-up: oneDNN primitives, allocator caches
    fn()
    n, spent = 1, 0.0  # calibrate: double the count until a batch of calls takes >= target_s / 4
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        spent = time.perf_counter() - t0
        if spent >= target_s / 4 or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * target_s / max(spent, 1e-9)))
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n)
    s = sorted(per)
    return {"median_us": 1e6 * s[len(s) // 2], "min_us": 1e6 * s[0], "max_us": 1e6 * s[-1], "iters": n}


def layers(a):
    out = {"framework": f"torch {torch.__version__} (timed from Python)", "threads": torch.get_num_threads(),
           "reps": a.reps, "layers": {}}
    for name in ("conv1", "pool", "conv2", "fc1", "loss"):
        for mode, dt in (("f32", None), ("bf16", torch.bfloat16)):
            params, x, f = make_layer(name, dt)

            def fwd():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dt is not None):
                    return f(x)

            seed = None if name == "loss" else torch.ones_like(fwd())

            def fwdbwd():
                y = fwd()
                y.backward(seed)
                for p in params:
                    p.grad = None
                x.grad = None

            r = {"fwd": time_fn(fwd, a.reps, a.seconds), "fwdbwd": time_fn(fwdbwd, a.reps, a.seconds)}
            out["layers"][f"{name}/{mode}"] = r
            print(f"{name:6} {mode:5} fwd {r['fwd']['median_us']:10.1f} us   fwd+bwd {r['fwdbwd']['median_us']:10.1f} us",
                  flush=True)
        out["layers"][f"{name}/f16"] = {"na": "no CPU fp16 autocast in torch 1.13"}
    return out


# ---- (c) op overhead from Python -------------------------------------------------------------

def op_overhead(a):
    x, y = torch.ones(1, requires_grad=True), torch.full((1,), 2.0, requires_grad=True)

    def fwd():
        return torch.add(x, y)

    def fwdbwd():
        torch.add(x, y).backward()
        x.grad = None
        y.grad = None

    out = {"framework": f"torch {torch.__version__} (Python)", "reps": a.reps,
           "BM_add_1_grad_forward": time_fn(fwd, a.reps, a.seconds),
           "BM_add_1_grad_forward_backward": time_fn(fwdbwd, a.reps, a.seconds)}
    for k in ("BM_add_1_grad_forward", "BM_add_1_grad_forward_backward"):
        print(f"{k:32} {out[k]['median_us'] * 1e3:9.0f} ns (Python)")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["throughput", "layers", "op-overhead"])
    ap.add_argument("--model", default="smallcnn")
    ap.add_argument("--modes", default="fp32,fp16,bf16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="layers / op-overhead: repetitions")
    ap.add_argument("--seconds", type=float, default=0.1, help="layers / op-overhead: seconds per repetition")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    r = {"throughput": throughput, "layers": layers, "op-overhead": op_overhead}[a.what](a)
    with open(a.json, "w") as f:
        json.dump(r, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
