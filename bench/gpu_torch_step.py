#!/usr/bin/python3
"""bench/gpu_torch_step.py — PyTorch eager on the GPU, the twin of bench_gpu_step's training
steps, for scripts/gpu-check.sh's side-by-side table: SmallCNN (batch 128, 1x28x28) and ResNet-20
(batch 128 and 1024, 3x32x32), one SGD step (lr 0.01, momentum 0.9) in FP32, autocast FP16 with a
GradScaler, and autocast BF16; the same random batch every step, as bench_gpu_step does.

Each row: one line in bench_gpu_step's naming, the median step time over the timed windows and
images/s, so gpu-check.sh prints them under "torch:" beside mixtape's rows. TF32 is off for
convolutions and matmuls, as in mixtape (PyTorch's own default enables it for cuDNN convs).

  python3 bench/gpu_torch_step.py [--steps 30] [--windows 5]
  python3 bench/gpu_torch_step.py --self-test      # on any machine: the script itself, on the CPU
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_fashion_mnist as tfm  # noqa: E402  (SmallCNN)
from torch_suite import ResNet  # noqa: E402  (models/zoo/resnet.cpp's ResNet)

# (row name, model, batch, steps per window or None for --steps): bench_gpu_step's rows
ROWS = [("smallcnn", "smallcnn", 128, None), ("resnet20", "resnet20", 128, None), ("resnet20_b1024", "resnet20", 1024, 8)]


def step_time(model_name, mode, steps, windows, device, batch=128):
    torch.manual_seed(0)
    if model_name == "smallcnn":
        model, shape = tfm.SmallCNN(), (batch, 1, 28, 28)
    else:
        model, shape = ResNet(20, 10, 3), (batch, 3, 32, 32)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    enabled = mode == "amp_fp16" and dev.type == "cuda"
    # torch.amp.GradScaler("cuda") where it exists (2.3 on; torch.cuda.amp's is deprecated there),
    # torch.cuda.amp's in older releases (Debian's 1.13).
    scaler = (torch.amp.GradScaler("cuda", enabled=enabled) if hasattr(getattr(torch, "amp", None), "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=enabled))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g).to(dev)
    y = (torch.rand(batch, generator=g) * 10).long().to(dev)
    dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(mode)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(3):  # warm-up: cuDNN algorithm choice, allocator cache, optimizer state
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times), torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--self-test", action="store_true",
                    help="one tiny window per row on the CPU (bf16 autocast stands in for fp16): checks the script")
    a = ap.parse_args()
    if a.self_test:
        for row, model_name, batch, _ in ROWS:  # the rows' models and batches, a tenth of each batch
            for mode in ("fp32", "amp_bf16"):
                t, _ = step_time(model_name, mode, 1, 1, "cpu", batch // 10)
                print(f"{row + '_step/' + mode:<48} {t * 1e3:>10.3f} ms (cpu self-test, batch {batch // 10})")
        return 0
    if not torch.cuda.is_available():
        print("skipped: torch.cuda.is_available() is false")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for row, model_name, batch, steps in ROWS:
        for mode in ("fp32", "amp_fp16", "amp_bf16"):
            t, peak = step_time(model_name, mode, steps or a.steps, a.windows, "cuda", batch)
            print(f"{row + '_step/' + mode:<48} {t * 1e3:>10.3f} ms images_per_s={batch / t:.4g} "
                  f"peak_bytes={peak:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
