"""Time a tiled matrix-multiply kernel: the workload of the quickstart campaign.

A stand-in for compiling and benchmarking a real GPU kernel. It computes C = A @ B
(4096 x 4096, fp32) on a simulated GPU with a cost model a kernel author would recognise:

* big ``tile_m`` x ``tile_n`` tiles reuse each loaded value more, but need more registers
  per thread (past 255 they spill) and leave SMs idle in the last wave;
* a longer ``tile_k`` amortises the block's synchronisation per step, but costs shared
  memory, and fewer blocks then fit on an SM to hide latency;
* ``unroll`` buys instruction-level parallelism with registers; ``vectorize`` loads float4;
* with ``layout = "col"`` (B column-major) loads of B are only coalesced for a long
  ``tile_k``.

The measured time carries 3% noise, seeded by the configuration, so the same configuration
always measures the same. dse runs it once per trial, with the params of the trial in
``$DSE_PARAMS_FILE``; it reports ``time_ms`` (the objective), ``gflops`` and ``smem_kb``,
the shared memory one block's tiles take (what ``pareto.toml`` trades against time: less of it
leaves room for other kernels on the SM).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from typing import Any

import dse.trial

M = N = K = 4096
THREADS = 256  # per block
SMS, PEAK_FLOPS, DRAM_BYTES_PER_S, L2_REUSE = 108, 19.5e12, 1.55e12, 3.0
SMEM_PER_SM, REGS_PER_SM, MAX_BLOCKS_PER_SM = 164 * 1024, 65536, 8


def kernel_time_ms(
    tile_m: int, tile_n: int, tile_k: int, unroll: int, layout: str, vectorize: bool
) -> float:
    """Noise-free runtime of the kernel on the simulated GPU, in milliseconds."""
    accumulators = tile_m * tile_n / THREADS
    registers = 32 + accumulators + 4 * unroll * (2 if vectorize else 1)
    spill = max(0.0, registers - 255)
    smem = 2 * 4 * (tile_m * tile_k + tile_k * tile_n)  # double-buffered fp32 tiles
    per_sm = min(
        MAX_BLOCKS_PER_SM,
        SMEM_PER_SM // smem,
        REGS_PER_SM // (THREADS * min(registers, 255)),
    )
    per_sm = max(per_sm, 1)

    blocks = math.ceil(M / tile_m) * math.ceil(N / tile_n)
    slots = SMS * per_sm
    waves = math.ceil(blocks / slots)
    efficiency = (
        accumulators / (accumulators + 4)  # FMAs per shared-memory load
        * math.sqrt(min(1.0, per_sm * THREADS / 32 / 16))  # warps resident to hide latency
        * blocks / (waves * slots)  # the last wave leaves SMs idle
        * tile_k / (tile_k + 6)  # one synchronisation per k step
        * {1: 0.8, 2: 0.9, 4: 1.0, 8: 0.97}[unroll]
    )
    compute_s = 2.0 * M * N * K / (PEAK_FLOPS * efficiency) * (1 + 0.03 * spill)

    coalesced_a = min(1.0, tile_k / 32)
    coalesced_b = min(1.0, (tile_n if layout == "row" else tile_k) / 32)
    width = 1.0 if vectorize else 0.75
    bytes_a = 4.0 * M * K * (N / tile_n) / coalesced_a
    bytes_b = 4.0 * K * N * (M / tile_m) / coalesced_b
    memory_s = (bytes_a + bytes_b) / (L2_REUSE * DRAM_BYTES_PER_S * width)

    # Overlap is good, not perfect: the lesser of the two still shows a little.
    seconds = max(compute_s, memory_s) + 0.1 * min(compute_s, memory_s) + 5e-6
    return seconds * 1e3


def measurement_noise(params: dict[str, Any]) -> float:
    """A factor around 1 (3% spread), the same every time for the same configuration."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).digest()
    return math.exp(random.Random(digest).gauss(0.0, 0.03))


def main() -> None:
    p = dse.trial.params()
    tile_m, tile_n, tile_k = int(p["tile_m"]), int(p["tile_n"]), int(p["tile_k"])
    unroll, layout, vectorize = int(p["unroll"]), str(p["layout"]), bool(p["vectorize"])
    # "Compile and benchmark": bigger tiles take longer, 0.3 s to 0.8 s.
    size = math.log2(tile_m * tile_n * tile_k)
    time.sleep(0.3 + 0.5 * (size - 11) / 11)

    time_ms = kernel_time_ms(tile_m, tile_n, tile_k, unroll, layout, vectorize)
    time_ms *= measurement_noise(p)
    gflops = 2.0 * M * N * K / (time_ms * 1e-3) / 1e9
    print(f"{p} -> {time_ms:.3f} ms, {gflops:.0f} GFLOP/s", flush=True)
    smem_kb = (tile_m * tile_k + tile_k * tile_n) * 4 / 1024
    dse.trial.report({"time_ms": round(time_ms, 4), "gflops": round(gflops, 1),
                      "smem_kb": smem_kb})


if __name__ == "__main__":
    main()
