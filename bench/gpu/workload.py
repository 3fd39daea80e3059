"""A CUDA workload of known phases for bench/gpu_check.sh: what persyst should measure.

Phases (each PHASE seconds, default 8): idle with 8 GiB allocated; the whole GPU busy
(bf16 matrix products); one block of 32 threads spinning (a kernel that keeps one SM of
the GPU's busy, the rest idle); idle again. Each phase's start and end are printed as
"phase NAME START END" in CLOCK_MONOTONIC seconds, the clock of persyst-nvml's "t=".
Needs PyTorch; the one-block kernel needs CuPy (else PyTorch's smallest kernels, launched
back to back, stand in for it and the script says so).
"""
import os
import sys
import time

import torch

PHASE = float(os.environ.get("PHASE", "8"))
mono = time.monotonic


def phase(name, fn):
    t0 = mono()
    fn(t0 + PHASE)
    torch.cuda.synchronize()
    print(f"phase {name} {t0:.6f} {mono():.6f}", flush=True)


def idle(until):
    time.sleep(max(0.0, until - mono()))


def full(until):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    n = 0
    while mono() < until:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    print(f"info full products={n} flops={n * 2 * 8192**3:.3e}", flush=True)


def one_block(until):
    try:
        import cupy
    except ImportError:
        print("info one_block cupy missing: tiny PyTorch kernels instead", flush=True)
        x = torch.zeros(32, device="cuda")
        while mono() < until:
            for _ in range(1000):
                x.add_(1)
            torch.cuda.synchronize()
        return
    spin = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles, int *out) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = 1;
}""", "spin")
    out = cupy.zeros(1, dtype=cupy.int32)
    n = 0
    while mono() < until:
        spin((1,), (32,), (cupy.int64(100_000_000), out))  # ~50-100 ms a launch
        cupy.cuda.runtime.deviceSynchronize()
        n += 1
    print(f"info one_block launches={n}", flush=True)


def main():
    print(f"info device {torch.cuda.get_device_name(0)} sms={torch.cuda.get_device_properties(0).multi_processor_count}", flush=True)
    buf = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    buf.fill_(1)
    torch.cuda.synchronize()
    print(f"info allocated {buf.numel()} bytes; torch reserved {torch.cuda.memory_reserved()}", flush=True)
    phase("idle", idle)
    phase("full", full)
    phase("one_block", one_block)
    phase("idle2", idle)
    del buf
    return 0


if __name__ == "__main__":
    sys.exit(main())
