#!/usr/bin/python3
"""bench/gpu_torch_step.py — PyTorch on the GPU, the twin of bench_gpu_step's training steps, for
scripts/gpu-check.sh's side-by-side table: SmallCNN (batch 128, 1x28x28) and ResNet-20 (batch 128
and 1024, 3x32x32), one SGD step (lr 0.01, momentum 0.9) in FP32, autocast FP16 with a
GradScaler, and autocast BF16; the same random batch every step, as bench_gpu_step does.

Two rows per mode: eager (torch.optim.SGD's default implementation), and `_graph`: PyTorch's
whole-network CUDA graph capture as its documentation gives it (torch.cuda.graph): three warm-up
steps on a side stream, then forward, backward, scaler.step and scaler.update and the optimizer
step captured once and replayed, with the fused SGD (fused=True, whose kernels take the
GradScaler's scale and found_inf on the device, so scaler.step reads nothing on the host). A torch
without fused SGD gets "skipped" for the graph rows.

Each row: one line in bench_gpu_step's naming, the median over --windows timed windows of the time
per step (each window --steps steps ended by one torch.cuda.synchronize(), as bench_gpu_step times
mixtape) and images/s, so gpu-check.sh prints them under "torch:" beside mixtape's rows. TF32 is
off for convolutions and matmuls, and cuDNN runs as mixtape's does: benchmark mode off,
deterministic algorithms only (PyTorch's own defaults enable TF32 for cuDNN convs and allow
non-deterministic algorithms).

  python3 bench/gpu_torch_step.py [--steps 20] [--windows 5] [--no-graph]
  python3 bench/gpu_torch_step.py --self-test      # on any machine: the eager rows, on the CPU
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

# (row name, model, batch): bench_gpu_step's rows
ROWS = [("smallcnn", "smallcnn", 128), ("resnet20", "resnet20", 128), ("resnet20_b1024", "resnet20", 1024)]


def step_time(model_name, mode, steps, windows, device, batch=128, graphed=False):
    """Median time per step and the peak allocated bytes; None when this torch cannot capture the row."""
    torch.manual_seed(0)
    if model_name == "smallcnn":
        model, shape = tfm.SmallCNN(), (batch, 1, 28, 28)
    else:
        model, shape = ResNet(20, 10, 3), (batch, 3, 32, 32)
    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = model.to(dev)
    if graphed:
        try:  # the fused kernels take the scaler's scale and found_inf on the device
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
        except (TypeError, RuntimeError, ValueError):
            return None
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    enabled = mode == "amp_fp16" and dev.type == "cuda"
    # torch.amp.GradScaler("cuda") where it exists (2.3 on; torch.cuda.amp's is deprecated there),
    # torch.cuda.amp's in older releases (Debian's 1.13).
    scaler = (torch.amp.GradScaler("cuda", enabled=enabled) if hasattr(getattr(torch, "amp", None), "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=enabled))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g).to(dev)  # the static input and target of the graph rows
    y = (torch.rand(batch, generator=g) * 10).long().to(dev)
    dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(mode)

    def body():
        with torch.autocast(dev.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def step():
        opt.zero_grad(set_to_none=True)
        body()

    if graphed:
        # PyTorch's recipe (CUDA semantics, "Whole-network capture"): warm up on a side stream,
        # grads set to None before capture so backward allocates them from the graph's pool.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            body()
        run = graph.replay
        run()
    else:
        run = step
        for _ in range(3):  # warm-up: cuDNN algorithm choice, allocator cache, optimizer state
            step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(steps):
            run()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times), torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="steps per timed window (>= 20 for gpu-check's table)")
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--no-graph", action="store_true", help="the eager rows only")
    ap.add_argument("--self-test", action="store_true",
                    help="one tiny window per row on the CPU (bf16 autocast stands in for fp16): checks the script")
    a = ap.parse_args()
    if a.self_test:
        for row, model_name, batch in ROWS:  # the rows' models and batches, a tenth of each batch
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
    torch.backends.cudnn.deterministic = True
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for graphed in (False,) if a.no_graph else (False, True):
        for row, model_name, batch in ROWS:
            for mode in ("fp32", "amp_fp16", "amp_bf16"):
                name = row + "_step/" + mode + ("_graph" if graphed else "")
                r = step_time(model_name, mode, a.steps, a.windows, "cuda", batch, graphed)
                if r is None:
                    print(f"{name:<48} skipped: torch {torch.__version__} has no fused SGD", flush=True)
                    continue
                t, peak = r
                print(f"{name:<48} {t * 1e3:>10.3f} ms images_per_s={batch / t:.4g} peak_bytes={peak:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
