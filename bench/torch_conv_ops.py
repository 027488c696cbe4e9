#!/usr/bin/env python3
"""bench/torch_conv_ops.py -- PyTorch's twin of bench/conv_ops.cpp: conv2d forward, its input
gradient and its weight gradient (torch.ops.aten.convolution_backward with one output each) and
the bias gradient (sum over N, H, W), FP32 and BF16, batch 128, on SmallCNN's and ResNet-8's
convolution shapes; median over rounds of each case's per-call time (calibrated loop).

    /usr/bin/python3 bench/torch_conv_ops.py [--threads 2] [--rounds 7] [--min-ms 150] [--filter S]
"""
import argparse
import statistics
import time

import torch

SHAPES = [  # name, N, C, H, W, O, k, stride, pad, bias, input_grad (as bench/conv_ops.cpp)
    ("scnn.conv1 1->32 28x28", 128, 1, 28, 28, 32, 3, 1, 1, True, False),
    ("scnn.conv2 32->64 14x14", 128, 32, 14, 14, 64, 3, 1, 1, True, True),
    ("r8.conv1 1->16 28x28", 128, 1, 28, 28, 16, 3, 1, 1, False, False),
    ("r8.l1 16->16 28x28", 128, 16, 28, 28, 16, 3, 1, 1, False, True),
    ("r8.l2a 16->32 28x28 s2", 128, 16, 28, 28, 32, 3, 2, 1, False, True),
    ("r8.l2b 32->32 14x14", 128, 32, 14, 14, 32, 3, 1, 1, False, True),
    ("r8.l3a 32->64 14x14 s2", 128, 32, 14, 14, 64, 3, 2, 1, False, True),
    ("r8.l3b 64->64 7x7", 128, 64, 7, 7, 64, 3, 1, 1, False, True),
]


def time_per_call(fn, min_s):
    fn()
    iters = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        s = time.perf_counter() - t0
        if s >= min_s:
            return s / iters
        iters = iters * 10 if s <= 0 else max(iters + 1, int(iters * 1.3 * min_s / s))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=150)
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cases = []
    for (name, N, C, H, W, O, k, s, p, bias, igrad) in SHAPES:
        for dt, dn in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            base = f"{name} {dn} "
            x = torch.randn(N, C, H, W).to(dt)
            w = (torch.randn(O, C, k, k) * 0.1).to(dt)
            b = torch.randn(O).to(dt) if bias else None
            y = torch.nn.functional.conv2d(x, w, b, s, p)
            gy = torch.randn(y.shape).to(dt)
            bs = [O] if bias else None

            def fwd(x=x, w=w, b=b, s=s, p=p):
                with torch.no_grad():
                    torch.nn.functional.conv2d(x, w, b, s, p)

            def bwd(mask, x=x, w=w, gy=gy, s=s, p=p):
                torch.ops.aten.convolution_backward(gy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)

            cases.append([base + "fwd", fwd, []])
            if igrad:
                cases.append([base + "igrad", lambda bwd=bwd: bwd([True, False, False]), []])
            cases.append([base + "wgrad", lambda bwd=bwd: bwd([False, True, False]), []])
            if bias:
                cases.append([base + "bgrad", lambda gy=gy: gy.sum((0, 2, 3)), []])
    cases = [c for c in cases if a.filter in c[0]]
    for _ in range(a.rounds):
        for c in cases:
            c[2].append(time_per_call(c[1], a.min_ms / 1000))
    print(f"torch_conv_ops: torch {torch.__version__}, {a.threads} threads, {a.rounds} rounds, batch 128")
    for name, _, t in cases:
        print(f"{name:40s} {statistics.median(t) * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
