#!/usr/bin/env python3
"""scripts/gpu_verdict.py — the verdict of scripts/gpu-check.sh, from what its stages recorded.

PASS only when all of these hold:
  1. a GPU was visible (nvidia-smi listed one: --gpu-visible yes);
  2. the gpu-labelled tests ran on it: ctest's JUnit file for `ctest -L gpu` has at least
     --min-gpu-tests cases, none failed, and every case that skipped gave a reason a healthy
     one-GPU machine gives (ALLOWED_SKIPS: needs two GPUs, observable only on the emulator, ...).
     A skip for any other reason ("no usable GPU: ...", a crash before the test body) fails;
  3. the GPU benchmark produced figures: a Google Benchmark JSON file with training-step entries
     (resnet20_step/*, smallcnn_step/*) without error (the ResNet-20 FP32 / AMP FP16 step ratio is
     printed when both are there).
Otherwise FAIL, with every reason. Stage failures (build, timeouts) are the shell's and are
passed in with --stage-failure.

  gpu_verdict.py --gpu-visible yes --gpu-junit LOG/gpu-junit.xml --bench-json LOG/bench_gpu_step.json
  gpu_verdict.py --self-test      the verdict on the recorded outputs in tests/fixtures/gpu_verdict/

Exit status: 0 PASS, 1 FAIL, 2 bad arguments.
"""
import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# Skip reasons (regular expressions on the line after gtest's "Skipped", or on a skipped program's
# output) that a healthy machine with one GPU gives: tests for two GPUs (or one per NCCL rank), for
# the emulator's observable stream order or its cuDNN knobs and counters, for the no-GPU path, for
# a process where cuBLAS was not used yet.
ALLOWED_SKIPS = [
    r"needs two (GPUs|devices)",
    r"only the CUDA emulator can observe stream order",
    r"needs the CUDA emulator's cuDNN",
    r"NCCL needs one CUDA device per rank",
    r"a GPU is available: cudnnCreate succeeds",
    r"cuBLAS already used by an earlier test in this process",
]
# What a skipped program's output may not say anywhere (its reason is then "no GPU", whatever else
# it printed): these are the unhealthy reasons.
FORBIDDEN_IN_PROGRAM_SKIPS = [r"CUDA is not available", r"no usable GPU"]
# The gpu-labelled tests a complete build has (ctest -L gpu -N; 248 on 2026-12-02), less a margin
# for tests removed later: fewer means the build or the discovery lost some.
DEFAULT_MIN_GPU_TESTS = 200


def skip_reason(system_out):
    """The reason gtest printed for a skip: the line after 'file:line: Skipped'. A test that is not
    a gtest case (a program ctest skips by its SKIP_REGULAR_EXPRESSION) has no such line: its reason
    is the first line of its output with a forbidden reason (marked so that no allowed phrase on
    the same line can pass it), else the first line an allowed reason matches."""
    lines = (system_out or "").splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1].strip()
    for line in lines:
        if any(re.search(p, line) for p in FORBIDDEN_IN_PROGRAM_SKIPS):
            return "(unhealthy) " + line.strip()
    for line in lines:
        if any(re.search(p, line) for p in ALLOWED_SKIPS):
            return line.strip()
    return "(no reason printed: the test did not reach its body)"


def read_junit(path):
    """[(name, status, reason)] with status 'ran', 'failed' or 'skipped'."""
    cases = []
    root = ET.parse(path).getroot()
    for tc in root.iter("testcase"):
        name = tc.get("name", "?")
        out = tc.findtext("system-out") or ""
        if tc.find("failure") is not None or tc.find("error") is not None or tc.get("status") == "fail":
            cases.append((name, "failed", ""))
        elif tc.get("status") == "disabled":
            cases.append((name, "skipped", "disabled (DISABLED_ prefix or the DISABLED property)"))
        elif tc.find("skipped") is not None or tc.get("status") == "notrun":
            cases.append((name, "skipped", skip_reason(out)))
        else:
            cases.append((name, "ran", ""))
    return cases


def verdict(gpu_visible, gpu_junit, bench_jsons, min_gpu_tests, stage_failures):
    """(passed, [report lines])."""
    reasons, notes = [], []
    reasons += [f"stage {s} failed" for s in stage_failures]
    if not gpu_visible:
        reasons.append("no GPU was visible (nvidia-smi listed none)")
    if not gpu_junit or not os.path.isfile(gpu_junit):
        reasons.append(f"no JUnit results of the gpu-labelled tests ({gpu_junit or 'not given'})")
    else:
        try:
            cases = read_junit(gpu_junit)
        except (ET.ParseError, OSError) as e:
            cases = []
            reasons.append(f"unreadable JUnit file {gpu_junit}: {e}")
        ran = [c for c in cases if c[1] == "ran"]
        failed = [c for c in cases if c[1] == "failed"]
        skipped = [c for c in cases if c[1] == "skipped"]
        bad_skips = [c for c in skipped
                     if c[2].startswith("(unhealthy) ") or not any(re.search(p, c[2]) for p in ALLOWED_SKIPS)]
        notes.append(f"gpu tests: {len(cases)} listed, {len(ran)} ran, {len(failed)} failed, "
                     f"{len(skipped)} skipped ({len(skipped) - len(bad_skips)} for an expected reason)")
        if len(cases) < min_gpu_tests:
            reasons.append(f"only {len(cases)} gpu-labelled tests were listed, expected at least {min_gpu_tests}")
        if not ran and cases:
            reasons.append("no gpu-labelled test ran")
        for name, _, _ in failed[:20]:
            reasons.append(f"gpu test failed: {name}")
        for name, _, why in bad_skips[:20]:
            reasons.append(f"gpu test skipped: {name}: {why}")
        if len(failed) > 20 or len(bad_skips) > 20:
            reasons.append(f"... {len(failed)} failed and {len(bad_skips)} unexpected skips in all")
    figures = {}
    for path in bench_jsons:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            notes.append(f"benchmark file {path}: unreadable ({e})")
            continue
        for b in data.get("benchmarks", []):
            if not b.get("error_occurred") and "real_time" in b:
                figures[b["name"]] = b
    if not figures:
        reasons.append("the GPU benchmark produced no figures")
    elif not any(n.startswith(("resnet20_step/", "smallcnn_step/")) for n in figures):
        reasons.append("the GPU benchmark produced no training-step figures (resnet20_step/*, smallcnn_step/*)")
    else:
        notes.append(f"benchmark figures: {len(figures)}")
        for row, what in (("resnet20_step", "ResNet-20 step"), ("resnet20_b1024_step", "ResNet-20 batch-1024 step")):
            fp32 = next((b for n, b in figures.items() if n.startswith(row + "/fp32")), None)
            fp16 = next((b for n, b in figures.items() if n.startswith(row + "/amp_fp16")), None)
            if fp32 and fp16 and fp16["real_time"] > 0:
                notes.append(f"{what}: FP32 {fp32['real_time']:.3f} {fp32.get('time_unit', '')}, AMP FP16 "
                             f"{fp16['real_time']:.3f} {fp16.get('time_unit', '')}: "
                             f"{fp32['real_time'] / fp16['real_time']:.2f}x (target 2x)")
    lines = notes + [f"FAIL: {r}" for r in reasons]
    return not reasons, lines


def self_test():
    """Runs the verdict on the recorded outputs; every case must come out as recorded."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gpu_verdict")
    fx = lambda name: os.path.join(here, name)  # noqa: E731
    cases = [
        # name, gpu visible, junit, bench files, expected pass, a phrase the report must contain
        ("healthy one-GPU machine", True, "healthy.xml", ["bench.json"], True, "1.90x (target 2x)"),
        ("CUDA_VISIBLE_DEVICES= : every gpu test skips", True, "no_gpu.xml", ["bench_empty.json"], False,
         "gpu test skipped: CudaCopy.RoundTripIsBitExactForEveryDtype: no usable GPU: no CUDA device"),
        ("no nvidia-smi GPU", False, "healthy.xml", ["bench.json"], False, "no GPU was visible"),
        ("a gpu test failed", True, "one_failed.xml", ["bench.json"], False, "gpu test failed: CudaCopy.SameDeviceIsNoCopy"),
        ("a skip for another reason", True, "odd_skip.xml", ["bench.json"], False,
         "gpu test skipped: CudaStream.GuardsSetAndRestoreDeviceAndStream: (no reason printed"),
        ("no benchmark figures", True, "healthy.xml", ["bench_empty.json"], False, "produced no figures"),
        ("GEMM figures only", True, "healthy.xml", ["bench_gemm_only.json"], False, "no training-step figures"),
        ("no JUnit file (the stage timed out)", True, "missing.xml", ["bench.json"], False, "no JUnit results"),
        ("a program skipped for want of a GPU per NCCL rank", True, "program_skip.xml", ["bench.json"], True,
         "1 skipped (1 for an expected reason)"),
        ("a program skipped without CUDA", True, "program_no_cuda.xml", ["bench.json"], False,
         "gpu test skipped: example_train_two_ranks_cuda: (unhealthy) rank 0 of 2 failed: train_fashion_mnist: CUDA is not available"),
    ]
    ok = True
    for name, visible, junit, benches, expect, phrase in cases:
        passed, lines = verdict(visible, fx(junit), [fx(b) for b in benches], min_gpu_tests=3, stage_failures=[])
        text = "\n".join(lines)
        good = passed == expect and phrase in text
        ok &= good
        print(f"{'ok ' if good else 'BAD'} {name}: {'PASS' if passed else 'FAIL'}")
        if not good:
            print("    " + text.replace("\n", "\n    "))
    # The first run on a real GPU (an H200, 2026-12-04, all 324 cases, cut to the failed and skipped
    # ones' output): its two failures are named, and none of its nine skips is taken for a fault.
    passed, lines = verdict(True, fx("h200_2026-12-04.xml"), [fx("bench.json")], min_gpu_tests=200, stage_failures=[])
    text = "\n".join(lines)
    good = (not passed and "gpu test failed: CudaBatchNorm.ParityEveryDtypeParameterDtypeModeAndShape" in text
            and "gpu test failed: example_train_two_ranks_cuda" in text and "gpu test skipped" not in text
            and "9 skipped (9 for an expected reason)" in text)
    ok &= good
    print(f"{'ok ' if good else 'BAD'} the H200 run of 2026-12-04: {'PASS' if passed else 'FAIL'}")
    if not good:
        print("    " + text.replace("\n", "\n    "))
    # Too few gpu tests listed fails even when all of them ran.
    passed, lines = verdict(True, fx("healthy.xml"), [fx("bench.json")], min_gpu_tests=200, stage_failures=[])
    good = not passed and any("expected at least 200" in line for line in lines)
    ok &= good
    print(f"{'ok ' if good else 'BAD'} too few gpu tests listed: {'PASS' if passed else 'FAIL'}")
    print("self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu-visible", choices=["yes", "no"])
    p.add_argument("--gpu-junit")
    p.add_argument("--bench-json", action="append", default=[])
    p.add_argument("--min-gpu-tests", type=int, default=DEFAULT_MIN_GPU_TESTS)
    p.add_argument("--stage-failure", action="append", default=[])
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    if a.gpu_visible is None:
        p.error("--gpu-visible yes|no is required")
    passed, lines = verdict(a.gpu_visible == "yes", a.gpu_junit, a.bench_json, a.min_gpu_tests, a.stage_failure)
    for line in lines:
        print(line)
    print("RESULT: PASS" if passed else "RESULT: FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
