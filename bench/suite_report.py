#!/usr/bin/python3
"""bench/suite_report.py OUT — turns the raw outputs bench/suite.sh left in OUT (JSON from
train_throughput, torch_suite.py, fma_peak and Google Benchmark; amp_step's text table;
meta.txt) into one set of markdown tables with the machine's details, printed and written to
OUT/summary.md. Standard library only, so it runs where torch is missing; any input that is
absent becomes a cell that says why, never an exception.

  /usr/bin/python3 bench/suite_report.py out/bench-suite
  /usr/bin/python3 bench/suite_report.py --self-test     # checks the parsers on built-in samples

The FLOP counts of table (d) are derived here from the layer shapes (flops_table), and the
derivation is printed with the totals.
"""
import json
import os
import platform
import re
import subprocess
import sys

NA_FP16 = "n/a (no CPU fp16 autocast in torch 1.13)"


# ---- reading ---------------------------------------------------------------------------------

def load_json(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_meta(out):
    meta = {}
    try:
        with open(os.path.join(out, "meta.txt")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                meta[k] = v
    except OSError:
        pass
    return meta


UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def gbench(doc, field="real_time"):
    """Google Benchmark JSON -> {name: (median_ns, min_ns, max_ns, n)} over the repetitions'
    `field` (real_time or cpu_time) from the per-repetition rows, not the aggregates, so min..max
    is the spread."""
    runs = {}
    for b in (doc or {}).get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b:
            continue
        name = re.sub(r"/real_time$", "", b.get("run_name", b["name"]))
        runs.setdefault(name, []).append(b[field] * UNIT_NS[b.get("time_unit", "ns")])
    return {k: (sorted(v)[len(v) // 2], min(v), max(v), len(v)) for k, v in runs.items()}


def amp_step_table(text):
    """amp_step's table -> {mode: {"step_ms", "peak_mib", "x_fp32", "over_start_mib"}}."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+([\d.]+)\s+\(([\d.]+)\.\.([\d.]+)\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            g = m.groups()
            rows[g[0]] = {"step_ms": float(g[1]), "peak_mib": float(g[7]), "x_fp32": float(g[8]),
                          "over_start_mib": float(g[9]), "over_x_fp32": float(g[10])}
    return rows


# ---- FLOPs from the layer shapes -------------------------------------------------------------

def conv(name, cin, cout, k, hout, first=False):
    return (name, f"conv {cin}->{cout} {k}x{k}, out {hout}x{hout}", 2 * cout * hout * hout * cin * k * k, first)


def linear(name, fin, fout):
    return (name, f"linear {fin}->{fout}", 2 * fin * fout, False)


SMALLCNN = [conv("conv1", 1, 32, 3, 28, first=True), conv("conv2", 32, 64, 3, 14),
            linear("fc1", 3136, 128), linear("fc2", 128, 10)]
RESNET8 = [conv("conv1", 1, 16, 3, 28, first=True),
           conv("layer1.conv1", 16, 16, 3, 28), conv("layer1.conv2", 16, 16, 3, 28),
           conv("layer2.conv1", 16, 32, 3, 14), conv("layer2.conv2", 32, 32, 3, 14),
           conv("layer2.downsample", 16, 32, 1, 14),
           conv("layer3.conv1", 32, 64, 3, 7), conv("layer3.conv2", 64, 64, 3, 7),
           conv("layer3.downsample", 32, 64, 1, 7), linear("fc", 64, 10)]


def flops(layers):
    """Per image: forward = 2 x MACs; backward = weight gradient (= forward) + input gradient
    (= forward, except the first layer, whose input is the batch and needs none)."""
    fwd = sum(f for _, _, f, _ in layers)
    bwd = sum(f + (0 if first else f) for _, _, f, first in layers)
    return fwd, bwd


def flops_table(title, layers):
    lines = [f"**{title}** (per image; multiply-add = 2 FLOP)", "",
             "| layer | shape | forward | backward (input grad + weight grad) |", "|---|---|---:|---:|"]
    for name, shape, f, first in layers:
        b = f"{'0' if first else fmt_int(f)} + {fmt_int(f)}"
        lines.append(f"| {name} | {shape} | {fmt_int(f)} | {b} |")
    fwd, bwd = flops(layers)
    lines.append(f"| **total** | | {fmt_int(fwd)} | {fmt_int(bwd)} |")
    lines.append("")
    lines.append(f"Forward + backward: **{(fwd + bwd) / 1e6:.2f} MFLOP per image** "
                 f"(3 x forward would be {3 * fwd / 1e6:.2f}: the first layer's input gradient is never computed).")
    return lines


def fmt_int(n):
    return f"{n:,}"


# ---- formatting ------------------------------------------------------------------------------

def load_rounds(out, fw, model):
    """Table (a)'s runs of one framework and model: tp_<fw>_<model>_r<k>.json for k = 1, 2, ...
    (suite.sh --rounds), or the single tp_<fw>_<model>.json of an older suite."""
    rounds, k = [], 1
    while (d := load_json(out, f"tp_{fw}_{model}_r{k}.json")) is not None:
        rounds.append(d)
        k += 1
    if not rounds and (d := load_json(out, f"tp_{fw}_{model}.json")) is not None:
        rounds.append(d)
    return rounds


def merge_rounds(rounds):
    """One result from several rounds: per mode, the median of the rounds' medians, the min..max
    of every window, and the rounds' medians themselves (for per-round ratios)."""
    if not rounds:
        return None
    merged = dict(rounds[0], rounds=len(rounds), modes={})
    for mode, first in rounds[0]["modes"].items():
        ds = [r["modes"].get(mode) or {} for r in rounds]
        if not all("images_per_s" in d for d in ds):
            merged["modes"][mode] = first
            continue
        meds = [d["images_per_s"] for d in ds]
        merged["modes"][mode] = dict(first, images_per_s=median(meds), min=min(d["min"] for d in ds),
                                     max=max(d["max"] for d in ds), round_medians=meds)
    return merged


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def round_ratio(a, b):
    """Median over rounds of a's rate / b's rate in the same round (the machine's speed drifts
    between rounds; within one round both ran back to back)."""
    ra, rb = a.get("round_medians", [a["images_per_s"]]), b.get("round_medians", [b["images_per_s"]])
    n = min(len(ra), len(rb))
    return median([ra[i] / rb[i] for i in range(n)])


def fmt_rate(d):
    if not d:
        return "—"
    if "na" in d:
        return d["na"]
    return f"{d['images_per_s']:.0f} ({d['min']:.0f}..{d['max']:.0f})"


def fmt_us(ns):
    return f"{ns / 1e3:.1f}" if ns >= 1e4 else f"{ns / 1e3:.2f}"


def fmt_bwd(ns):
    # A difference of two medians; below zero only when the machine was noisier during fwd.
    return fmt_us(ns) if ns >= 0 else "< 0 (noise)"


def fmt_ns(ns):
    return f"{ns / 1e3:.2f} µs" if ns >= 1e4 else f"{ns:.0f} ns"


def cpu_info():
    info = {}
    try:
        txt = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in txt.splitlines():
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    except OSError:
        pass
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
            mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    isa = [x for x in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if x in flags]
    info["_vm"] = info.get("Hypervisor vendor", "") + " VM" if "hypervisor" in flags else "no hypervisor flag"
    return info, isa, mem


def compiler_version(path):
    if not path:
        return "?"
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[0]
    except (OSError, IndexError):
        return path


# ---- the report ------------------------------------------------------------------------------

def report(out):
    meta = read_meta(out)
    threads = meta.get("threads", "?")
    torch_ver = meta.get("torch")
    torch_label = f"torch {torch_ver}" if torch_ver else "torch"
    no_torch = meta.get("torch_missing")
    L = []
    info, isa, mem = cpu_info()
    ctx = (load_json(out, "layers_mixtape.json") or {}).get("context", {})
    if "CPU max MHz" not in info and ctx.get("mhz_per_cpu"):
        info["clock (Google Benchmark)"] = f"{ctx['mhz_per_cpu']} MHz"  # a VM's lscpu may report none
    L += ["# mixtape benchmark suite" + (" (--quick: rough numbers, proves the suite runs)" if meta.get("quick") == "1" else ""),
          "", "| machine | |", "|---|---|",
          f"| CPU | {info.get('Model name', platform.processor() or '?')} (family {info.get('CPU family', '?')}, "
          f"model {info.get('Model', '?')}; {info['_vm'].strip()}) |",
          f"| cores | {info.get('CPU(s)', os.cpu_count())} logical ({info.get('Thread(s) per core', '?')} per core, "
          f"{info.get('Socket(s)', '?')} socket(s)); {threads} threads used by every run |",
          f"| ISA | {', '.join(isa) or 'none of avx2/fma/f16c/avx512'} |",
          f"| caches, clock | {', '.join(f'{k} {info[k]}' for k in ('L1d cache', 'L2 cache', 'L3 cache', 'CPU max MHz', 'clock (Google Benchmark)') if k in info) or 'not reported by lscpu'} |",
          f"| memory | {mem} |",
          f"| compiler | {compiler_version(meta.get('compiler'))}, Release, `-DMIXTAPE_CUDA=OFF` ({meta.get('build_dir', '?')}) |",
          f"| mixtape's BLAS | {(merge_rounds(load_rounds(out, 'mixtape', 'smallcnn')) or {}).get('blas', '?')} (OPENBLAS_CORETYPE={meta.get('openblas_coretype') or 'unset'}) |",
          f"| PyTorch | {torch_label if torch_ver else 'not installed: ' + str(no_torch)} |",
          f"| mixtape | commit {meta.get('commit', '?')} |",
          f"| run | {meta.get('started', '?')} .. {meta.get('finished', '?')}; load average {meta.get('load_start', '?')} "
          f"at start, {meta.get('load_end', '?')} at end |", ""]
    if no_torch:
        L += [f"PyTorch columns are empty: {no_torch}.", ""]
    try:
        with open(os.path.join(out, "failures.txt")) as f:
            failed = [l.strip() for l in f if l.strip()]
    except OSError:
        failed = []
    if failed:
        L += [f"**Failed steps** (their cells are empty; the errors are in run.log): {'; '.join(failed)}.", ""]

    # (d) first, since (a) uses it.
    fma = load_json(out, "fma.json")
    # The peak of the widest FMA mixtape's kernels use: AVX-512 where the CPU has it (mixtape's
    # SGEMM, ops/cpu/sgemm_avx512.h), else AVX2.
    wide = (fma or {}).get("avx512")
    peak = (wide["all"] if wide else fma["all"])["median"] if fma and fma.get("available") else None
    peak_isa = "AVX-512" if wide else "AVX2"
    # The BF16 dot-product peaks: vdpbf16ps (the AVX512_BF16 kernel's ceiling) and tdpbf16ps (the
    # AMX kernel's); a bf16 row divides by the one of the kernel train_throughput's BLAS line names.
    vdp_peak = ((fma or {}).get("avx512_bf16") or {}).get("all", {}).get("median")
    amx_peak = ((fma or {}).get("amx_bf16") or {}).get("all", {}).get("median")
    sc_fwd, sc_bwd = flops(SMALLCNN)
    r8_fwd, r8_bwd = flops(RESNET8)
    per_image = {"smallcnn": sc_fwd + sc_bwd, "resnet8": r8_fwd + r8_bwd}

    # (a)
    tp = {(fw, m): merge_rounds(load_rounds(out, fw, m))
          for fw in ("mixtape", "torch", "mixtape-emulated") for m in ("smallcnn", "resnet8")}
    first = next((v for v in tp.values() if v), None)
    desc = (f"batch 128, {threads} threads, data: {first['data']}; {first['warmup']} warm-up steps, then the median "
            f"of {first['windows']} windows of {first['steps']} steps; {first['rounds']} round(s), mixtape and torch "
            "run back to back in each: a cell is the median of the rounds' medians (min..max of all windows), a ratio "
            "the median of the per-round ratios") if first else "no data"
    L += ["## (a) Training throughput, images/s", "", desc + ".", "",
          f"| model | mode | mixtape | {torch_label} | mixtape / torch | mixtape / own fp32 | mixtape GFLOP/s | % of peak |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model in ("smallcnn", "resnet8"):
        mt, tt, et = tp[("mixtape", model)], tp[("torch", model)], tp[("mixtape-emulated", model)]
        blas = (mt or {}).get("blas", "")
        bf16_peak = amx_peak if "native (AMX" in blas else vdp_peak
        native = "bf16 GEMM: native" in blas
        rows = [("fp32", mt, "fp32"), ("fp16", mt, "fp16"), ("bf16", mt, "bf16")]
        if et:  # the same bf16 run with MIXTAPE_CPU_BF16=emulated: what a CPU without AVX512_BF16 gets
            rows.append(("bf16 emulated", et, "bf16"))
        for label, src, mode in rows:
            md = (src or {}).get("modes", {}).get(mode)
            td = (tt or {}).get("modes", {}).get(mode)
            if td is None:
                td = {"na": NA_FP16} if mode == "fp16" and torch_ver else {"na": "not run" if torch_ver else "no torch"}
            ratio = own = gf = pct = "—"
            if md and "images_per_s" in md:
                if "images_per_s" in td:
                    ratio = f"{round_ratio(md, td):.2f}x"
                base = ((mt or {}).get("modes") or {}).get("fp32") or {}
                if "images_per_s" in base:
                    own = f"{round_ratio(md, base):.2f}x"
                g = md["images_per_s"] * per_image[model] / 1e9
                gf = f"{g:.1f}"
                # BF16 on a native kernel against its instruction's peak, everything else the FMA's.
                ceiling = bf16_peak if label == "bf16" and native and bf16_peak else peak
                pct = f"{100 * g / ceiling:.1f}%" if ceiling else "—"
            L.append(f"| {model} | {label} | {fmt_rate(md)} | {fmt_rate(td)} | {ratio} | {own} | {gf} | {pct} |")
    used = {f"{fw} {m}: {v['threads']}" for (fw, m), v in tp.items() if v and str(v.get("threads")) != str(threads)}
    if used:
        L += ["", f"**Warning**: thread counts differ from --threads {threads}: {', '.join(sorted(used))}."]
    def torch_against(mode, ceiling, what):
        """PyTorch's `mode` throughput as GFLOP/s and % of `ceiling`, one line for both models."""
        cells = []
        for model in ("smallcnn", "resnet8"):
            td = ((tp[("torch", model)] or {}).get("modes", {}).get(mode) or {}).get("images_per_s")
            if td and ceiling:
                g = td * per_image[model] / 1e9
                cells.append(f"{model} {g:.1f} GFLOP/s = {100 * g / ceiling:.1f}%")
        return ["", f"PyTorch {mode} for the same FLOP counts: {'; '.join(cells)} of the {what}."] if cells else []
    top = amx_peak or vdp_peak
    L += torch_against("fp32", peak, f"{peak_isa} FMA peak") + torch_against(
        "bf16", top, "tdpbf16ps (AMX) peak" if amx_peak else "vdpbf16ps peak")
    peaks = ", ".join(p for p in (f"vdpbf16ps {vdp_peak:.1f}" if vdp_peak else "",
                                  f"AMX tdpbf16ps {amx_peak:.1f}" if amx_peak else "") if p)
    L += ["", f"% of peak: of the {peak_isa} FMA peak, except bf16 on mixtape's native BF16 GEMM (`bf16 GEMM: native` "
          f"in train_throughput's BLAS line): of the peak of the instruction it names{f' ({peaks} GFLOP/s, table (d))' if peaks else ''}. "
          "`bf16 emulated`: the bf16 run again with MIXTAPE_CPU_BF16=emulated (BF16 widened to FP32 for every GEMM), "
          "in the same rounds, where the CPU has AVX512_BF16."]
    L.append("")

    # (b)
    lm = gbench(load_json(out, "layers_mixtape.json"))
    lt = (load_json(out, "layers_torch.json") or {}).get("layers", {})
    L += ["## (b) SmallCNN layers at batch 128, µs per call", "",
          "Forward with grad recording; backward = (forward + backward) − forward, medians; spread = min..max of "
          f"the forward + backward repetitions. mixtape: Google Benchmark (`bench_layers`); {torch_label}: timed from "
          "Python (includes a few µs of binding overhead per call). f16 / bf16: under autocast, inputs in the dtype "
          "the previous layer hands on.", "",
          f"| layer | mode | mixtape fwd | mixtape bwd | mixtape fwd+bwd (min..max) | torch fwd | torch bwd | "
          "torch fwd+bwd (min..max) | mixtape / torch (fwd+bwd) |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for layer in ("conv1", "pool", "conv2", "fc1", "loss"):
        for mode in ("f32", "f16", "bf16"):
            f, fb = lm.get(f"layer/{layer}/{mode}/fwd"), lm.get(f"layer/{layer}/{mode}/fwdbwd")
            m_cells = ["—"] * 3
            if f and fb:
                m_cells = [fmt_us(f[0]), fmt_bwd(fb[0] - f[0]), f"{fmt_us(fb[0])} ({fmt_us(fb[1])}..{fmt_us(fb[2])})"]
            t = lt.get(f"{layer}/{mode}")
            t_cells, ratio = ["—"] * 3, "—"
            if t and "na" in t:
                t_cells = [NA_FP16, "", ""]
            elif t:
                tf, tfb = t["fwd"], t["fwdbwd"]
                t_cells = [fmt_us(tf["median_us"] * 1e3), fmt_bwd((tfb["median_us"] - tf["median_us"]) * 1e3),
                           f"{fmt_us(tfb['median_us'] * 1e3)} ({fmt_us(tfb['min_us'] * 1e3)}..{fmt_us(tfb['max_us'] * 1e3)})"]
                if fb:
                    ratio = f"{fb[0] / (tfb['median_us'] * 1e3):.2f}x"
            elif not torch_ver:
                t_cells = ["no torch", "", ""]
            L.append(f"| {layer} | {mode} | " + " | ".join(m_cells + t_cells) + f" | {ratio} |")
    L.append("")

    # (c)
    om = gbench(load_json(out, "op_mixtape.json"))
    oc = gbench(load_json(out, "op_torch_cxx.json"))
    omc = gbench(load_json(out, "op_mixtape.json"), "cpu_time")
    occ = gbench(load_json(out, "op_torch_cxx.json"), "cpu_time")
    op = load_json(out, "op_torch_python.json") or {}
    cxx_note = meta.get("torch_cxx_missing")
    L += ["## (c) Per-op framework overhead, 1-element f32 tensors, one thread", "",
          "Median of the repetitions' real time per call (min..max). Same benchmark bodies in `bench_op_overhead` "
          "(mixtape) and `bench_torch_op_overhead` (libtorch 1.13, C++ API)" +
          (f"; libtorch column empty: {cxx_note}" if cxx_note else "") +
          ". The Python column is PyTorch called from Python (`torch_suite.py op-overhead`): what a Python user pays, "
          "not the C++ API. CPU time (the benchmark thread's, per call, median) is given too: on a shared machine real time also counts "
          "the time the benchmark waited for a core, CPU time does not.", "",
          "| benchmark | mixtape | libtorch C++ | mixtape / libtorch | CPU time: mixtape | libtorch | ratio | torch from Python |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("BM_empty_1", "BM_add_1_no_grad", "BM_add_1_no_grad_guard", "BM_add_1_grad_forward",
                 "BM_add_1_grad_forward_backward", "BM_mul_1_grad_forward", "BM_relu_1_grad_forward"):
        m, c = om.get(name), oc.get(name)
        cell = lambda r: f"{fmt_ns(r[0])} ({fmt_ns(r[1])}..{fmt_ns(r[2])})" if r else "—"
        ratio = f"{m[0] / c[0]:.2f}x" if m and c else "—"
        mc, cc = omc.get(name), occ.get(name)
        cpu_cells = [fmt_ns(mc[0]) if mc else "—", fmt_ns(cc[0]) if cc else "—", f"{mc[0] / cc[0]:.2f}x" if mc and cc else "—"]
        py = op.get(name)
        pyc = f"{fmt_ns(py['median_us'] * 1e3)} ({fmt_ns(py['min_us'] * 1e3)}..{fmt_ns(py['max_us'] * 1e3)})" if py else "—"
        L.append(f"| `{name}` | {cell(m)} | {cell(c)} | {ratio} | " + " | ".join(cpu_cells) + f" | {pyc} |")
    L.append("")

    # (d)
    L += ["## (d) FMA peak and FLOPs per image", ""]
    if fma and fma.get("available"):
        st = lambda x: f"{x['median']:.1f} ({x['min']:.1f}..{x['max']:.1f})"
        L += [f"`fma_peak`: {fma['accumulators']} independent FMA chains per thread, 8 lanes (AVX2)"
              + (" and 16 lanes (AVX-512)" if wide else "") + f", median of {fma['runs']} runs (min..max), GFLOP/s:", "",
              "| threads | AVX2 |" + (" AVX-512 |" if wide else ""), "|---:|---:|" + ("---:|" if wide else ""),
              f"| 1 | {st(fma['one'])} |" + (f" {st(wide['one'])} |" if wide else ""),
              f"| {fma['all']['threads']} | {st(fma['all'])} |" + (f" {st(wide['all'])} |" if wide else ""),
              *([f"", f"AVX512_BF16 `vdpbf16ps` zmm (32 BF16 pair products into 16 FP32 lanes, 64 flops), "
                     f"{fma['avx512_bf16']['chains']} chains per thread: 1 thread {st(fma['avx512_bf16']['one'])}, "
                     f"{fma['avx512_bf16']['all']['threads']} threads {st(fma['avx512_bf16']['all'])} GFLOP/s: the "
                     "ceiling of mixtape's AVX512_BF16 GEMM."]
                if fma.get("avx512_bf16") else []),
              *([f"", f"AMX `tdpbf16ps` (a 16 x 32 by 32 x 16 BF16 tile product, 16,384 flops), "
                     f"{fma['amx_bf16']['accumulators']} accumulator tiles per thread: 1 thread {st(fma['amx_bf16']['one'])}, "
                     f"{fma['amx_bf16']['all']['threads']} threads {st(fma['amx_bf16']['all'])} GFLOP/s: the "
                     "ceiling of mixtape's AMX GEMM."]
                if fma.get("amx_bf16") else []),
              "", "Table (a)'s bf16 rows divide by the multi-thread median of the instruction their BF16 kernel runs.",
              "", f"Table (a)'s % of peak divides by the {fma['all']['threads']}-thread {peak_isa} median"
              + (": mixtape's f32 GEMMs run on AVX-512 here (ops/cpu/sgemm_avx512.h); its other loops use at most AVX2, "
                 "and PyTorch's oneDNN uses AVX-512 too." if wide else ".")]
        L.append("")
    else:
        L += ["FMA peak: n/a (fma_peak did not run, or the CPU lacks AVX2 + FMA).", ""]
    L += flops_table("SmallCNN", SMALLCNN) + [""] + flops_table("ResNet-8 (28x28 input, BatchNorm not counted)", RESNET8)
    L += ["", "Bias, ReLU, pooling, BatchNorm, the loss and the SGD update are not counted: memory-bound, "
          "a few percent of the FLOPs at most.", ""]

    # (e)
    L += ["## (e) Peak memory of a training step by dtype", ""]
    try:
        with open(os.path.join(out, "amp_step_smallcnn.txt")) as f:
            amp_txt = f.read()
    except OSError:
        amp_txt = ""
    rows = amp_step_table(amp_txt)
    if rows:
        head = amp_txt.splitlines()[0] if amp_txt else ""
        L += [f"`amp_step` ({head}): the allocator's high-water mark during a step (parameters, optimizer state and "
              "batch included); over start = activations, gradients and temporaries only.", "",
              "| mode | peak MiB | x fp32 | over start MiB | x fp32 | step ms |", "|---|---:|---:|---:|---:|---:|"]
        for mode, r in rows.items():
            L.append(f"| {mode} | {r['peak_mib']:.1f} | {r['x_fp32']:.2f} | {r['over_start_mib']:.1f} | "
                     f"{r['over_x_fp32']:.2f} | {r['step_ms']:.1f} |")
    else:
        L.append("amp_step: no table (see amp_step_smallcnn.txt).")
    peaks = []
    for model in ("smallcnn", "resnet8"):
        mt = tp[("mixtape", model)]
        if mt:
            peaks.append(f"{model} " + ", ".join(f"{m} {d['peak_bytes'] / 2**20:.1f} MiB" for m, d in mt["modes"].items()
                                                 if "peak_bytes" in d))
    if peaks:
        L += ["", "At batch 128 during table (a)'s timed steps (allocator peak, everything included): " + "; ".join(peaks) + "."]
    L.append("")
    return "\n".join(L)


def self_test():
    """The parsers on hand-written samples of each program's output."""
    gb = {"benchmarks": [
        {"name": "layer/conv1/f32/fwd/real_time", "run_name": "layer/conv1/f32/fwd/real_time", "run_type": "iteration",
         "real_time": t, "time_unit": "us"} for t in (3.0, 1.0, 2.0)] + [
        {"name": "layer/conv1/f32/fwd/real_time_median", "run_type": "aggregate", "real_time": 9, "time_unit": "us"}]}
    assert gbench(gb) == {"layer/conv1/f32/fwd": (2000.0, 1000.0, 3000.0, 3)}, gbench(gb)
    amp = ("smallcnn, batch 256, 2 threads, median of 5 steps\n"
           "mode                      step ms       (min..max)   x fp32     cpu ms   x fp32     peak MiB   x fp32   over start MiB   x fp32\n"
           "fp32                        187.8   (126.7..311.1)     1.00      300.0     1.00         79.1     1.00             75.1     1.00\n"
           "amp-fp16                    356.2   (286.7..362.5)     1.90      600.0     2.00         42.7     0.54             38.7     0.52\n")
    r = amp_step_table(amp)
    assert r["amp-fp16"]["peak_mib"] == 42.7 and r["amp-fp16"]["x_fp32"] == 0.54 and r["fp32"]["step_ms"] == 187.8, r
    fwd, bwd = flops(SMALLCNN)
    assert fwd == 451584 + 7225344 + 802816 + 2560 and bwd == 2 * fwd - 451584, (fwd, bwd)
    print("suite_report self-test: ok")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: suite_report.py OUT | --self-test")
    if sys.argv[1] == "--self-test":
        self_test()
        return
    out = sys.argv[1]
    text = report(out)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    print(f"\n(written to {os.path.join(out, 'summary.md')})")


if __name__ == "__main__":
    main()
