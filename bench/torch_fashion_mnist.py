#!/usr/bin/python3
"""bench/torch_fashion_mnist.py — the PyTorch twin of examples/train_fashion_mnist (SmallCNN).

Same model (conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU, maxpool 2,
flatten, linear 3136->128, ReLU, linear 128->10), same IDX files, same normalisation
((x/255 - 0.2860) / 0.3530 in float32, as data::normalize computes it), same recipe (SGD lr 0.05
momentum 0.9, batch 128, drop_last, 3 epochs; test batches of 500), same --limit semantics
(the first N images), same thread count, and the *same sample order*: the permutation of
mixtape's DataLoader (data/dataloader.cpp: Fisher-Yates driven by Philox4x32-10, core/rng.h)
is reimplemented below, bit for bit. Weights are initialised by torch (PyTorch's default init,
the same distributions mixtape uses, but not the same numbers).

Run with Debian's python3-torch:  /usr/bin/python3 bench/torch_fashion_mnist.py --epochs 1 --limit 2000
Writes a summary JSON with the keys of mixtape's --summary-json. peak_bytes here is the
process's peak resident set size (getrusage ru_maxrss), which includes the Python interpreter
and libtorch; mixtape's peak_bytes counts tensor bytes from its allocator. bench/compare.sh
also measures both programs' peak RSS the same way.
"""
import argparse
import gzip
import json
import os
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


# ---- mixtape's shuffle, reimplemented --------------------------------------------------------

def philox_words(seed, nwords):
    """Words 0..nwords-1 of mixtape's Philox4x32-10 stream (seed, offset 0): word j is
    element j % 4 of the block with counter j // 4 (core/rng.h philox_word)."""
    M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
    block = np.arange((nwords + 3) // 4, dtype=np.uint64)
    c0, c1 = block & np.uint64(MASK32), block >> np.uint64(32)
    c2 = np.zeros_like(block)
    c3 = np.zeros_like(block)
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    for _ in range(10):
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2  # < 2^64: no wrap
        hi0, lo0 = p0 >> np.uint64(32), p0 & np.uint64(MASK32)
        hi1, lo1 = p1 >> np.uint64(32), p1 & np.uint64(MASK32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
    return np.stack([c0, c1, c2, c3], axis=1).reshape(-1)[:nwords]


def epoch_order(n, seed, epoch):
    """DataLoader::order_for_epoch: Fisher-Yates over 0..n-1; step i (from n down to 2) swaps
    i-1 with (word[2(i-1)] << 32 | word[2(i-1)+1]) % i of the stream seeded
    seed * 0x9E3779B97F4A7C15 + epoch (mod 2^64)."""
    order = list(range(n))
    if n < 2:
        return order
    words = philox_words((seed * 0x9E3779B97F4A7C15 + epoch) & MASK64, 2 * n)
    i = np.arange(n, 1, -1, dtype=np.uint64)
    hi, lo = words[2 * (i - np.uint64(1))], words[2 * (i - np.uint64(1)) + np.uint64(1)]
    picks = ((hi << np.uint64(32)) | lo) % i
    for step, j in enumerate(picks.tolist()):
        a = n - 1 - step
        order[a], order[j] = order[j], order[a]
    return order


# ---- data ------------------------------------------------------------------------------------

def read_idx(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        raw = f.read()
    if raw[:2] != b"\0\0" or raw[2] != 0x08:
        sys.exit(f"{path}: not a u8 IDX file")
    nd = raw[3]
    shape = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(shape)


def load(data_dir, prefix, limit):
    def find(stem):
        for ext in (".gz", ""):
            if os.path.exists(os.path.join(data_dir, stem + ext)):
                return os.path.join(data_dir, stem + ext)
        sys.exit(f"no {stem}(.gz) in {data_dir} (apt-get install dataset-fashion-mnist, or --data)")
    x = read_idx(find(prefix + "-images-idx3-ubyte"))
    y = read_idx(find(prefix + "-labels-idx1-ubyte")).astype(np.int64)
    if 0 < limit < len(x):  # like the example's head(): only a real subset
        x, y = x[:limit], y[:limit]
    return x, y


SCALE, MEAN, INV_STD = np.float32(1) / np.float32(255), np.float32(0.2860), np.float32(1) / np.float32(0.3530)


def normalize(u8):  # (B, 28, 28) u8 -> (B, 1, 28, 28) f32, the same float ops as data::normalize
    return torch.from_numpy(((u8.astype(np.float32) * SCALE - MEAN) * INV_STD)[:, None])


# ---- model -----------------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def evaluate(model, x, y, batch=500):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(x), batch):
            logits = model(normalize(x[b:b + batch]))
            t = torch.from_numpy(y[b:b + batch])
            loss_sum += F.cross_entropy(logits, t, reduction="sum").item()
            correct += (logits.argmax(1) == t).sum().item()
    model.train()
    return loss_sum / len(x), correct / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch's default)")
    ap.add_argument("--limit", "--limit-train", dest="limit", type=int, default=0, help="first N training images")
    ap.add_argument("--limit-test", type=int, default=0, help="first N test images")
    ap.add_argument("--summary-json", default="out/torch_fashion_mnist/summary.json")
    ap.add_argument("--print-order", type=int, metavar="K", default=0,
                    help="print the first K indices of epoch 0's order and exit (to check against mixtape)")
    a = ap.parse_args()

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data, "train", a.limit)
    xte, yte = load(a.data, "t10k", a.limit_test)
    if a.print_order:
        print(" ".join(map(str, epoch_order(len(xtr), a.seed, 0)[:a.print_order])))
        return

    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    n_params = sum(p.numel() for p in model.parameters())
    steps = len(xtr) // a.batch_size  # drop_last
    print(f"torch {torch.__version__}: training smallcnn ({n_params} parameters) on Fashion-MNIST: {len(xtr)} train / "
          f"{len(xte)} test images, batch {a.batch_size}, {a.epochs} epochs, sgd lr {a.lr}, "
          f"{torch.get_num_threads()} threads", flush=True)

    t_start = time.perf_counter()
    train_seconds, images = 0.0, 0
    per_epoch, test_loss, test_acc = [], 0.0, 0.0
    for epoch in range(a.epochs):
        order = np.asarray(epoch_order(len(xtr), a.seed, epoch))
        model.train()
        t_epoch = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for s in range(steps):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            x, y = normalize(xtr[idx]), torch.from_numpy(ytr[idx])
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            images += len(idx)
            loss_sum += loss.item() * len(idx)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(idx)
        epoch_s = time.perf_counter() - t_epoch
        train_seconds += epoch_s
        test_loss, test_acc = evaluate(model, xte, yte)
        train_loss, train_acc = loss_sum / max(seen, 1), correct / max(seen, 1)
        print(f"epoch {epoch + 1}: train loss {train_loss:.4f}, train acc {100 * train_acc:.2f}%, test loss "
              f"{test_loss:.4f}, test acc {100 * test_acc:.2f}%, {epoch_s:.1f} s ({seen / epoch_s:.0f} images/s)",
              flush=True)
        per_epoch.append({"epoch": epoch + 1, "train_loss": train_loss, "train_accuracy": train_acc,
                          "test_loss": test_loss, "test_accuracy": test_acc, "seconds": epoch_s})
    wall = time.perf_counter() - t_start
    summary = {"model": "smallcnn", "framework": f"torch {torch.__version__}", "parameters": n_params,
               "optimizer": "sgd", "epochs": a.epochs, "batch_size": a.batch_size, "seed": a.seed,
               "threads": torch.get_num_threads(), "train_images": len(xtr), "test_accuracy": test_acc,
               "test_loss": test_loss, "train_images_per_s": images / train_seconds if train_seconds else 0.0,
               "wall_seconds": wall,
               "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "peak_bytes_kind": "process peak RSS (getrusage ru_maxrss)", "per_epoch": per_epoch}
    os.makedirs(os.path.dirname(os.path.abspath(a.summary_json)), exist_ok=True)
    with open(a.summary_json, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"test accuracy {100 * test_acc:.2f}% after {a.epochs} epochs ({wall:.1f} s); summary in {a.summary_json}")


if __name__ == "__main__":
    main()
