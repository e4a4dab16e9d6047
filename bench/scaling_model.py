#!/usr/bin/env python3
"""A prediction, on paper: data-parallel scaling of the default MLP, the tutorial CNN and a ResNet-50-sized model
(25.6 M parameters) on 8, 64 and 512 GPUs with NCCL-class links, from the alpha-beta model of a ring all-reduce,
calibrated on the all-reduce times trainkit measured on this machine (MPI over shared memory).

  python3 bench/scaling_model.py [--alpha-us A --beta-gbs B]   # the calibration (default: docs/distributed.md's)

Model (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): a ring all-reduce of S bytes over p ranks
takes T = 2 (p - 1) alpha + 2 (p - 1) / p * S / B. alpha (per-message latency) and B (bus bandwidth) are fitted
to two measured all-reduces; the GPU predictions then swap in link figures (below, stated as assumptions), and
NCCL's tree algorithm for the latency term at scale: T_tree = 2 log2(p) alpha + 2 S / B.
Overlap: gradients are all-reduced in buckets as the backward pass produces them; the share of a step's
all-reduce that can hide behind the rest of the backward pass is the model's `overlappable` fraction (where in
backward order its parameters' gradients appear: 0 for the MLP, whose largest gradient comes last).
"""
import argparse
import math

# Assumed links (not measured here): NVLink 4 + NVSwitch inside an 8-GPU H100/H200 node, NCCL bus bandwidth
# ~360 GB/s; across nodes InfiniBand NDR, 400 Gb/s per GPU, ~45 GB/s bus bandwidth; latencies per step.
LINKS = {8: (360.0, 3e-6), 64: (45.0, 8e-6), 512: (45.0, 8e-6)}
# Per-GPU step time (forward + backward) assumed on an H200-class GPU at the per-GPU batch, in seconds, and the
# share of the all-reduce that can overlap the backward pass.
MODELS = {
    "default MLP (235,146 params, batch 128/GPU)": (235146, 0.00015, 0.0),
    "tutorial CNN (3,274,634 params, batch 128/GPU)": (3274634, 0.0025, 0.9),
    "ResNet-50-sized (25.6 M params, batch 256/GPU)": (25.6e6, 0.085, 0.8),
}


def ring(p, size_bytes, alpha, gbs):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * size_bytes / (gbs * 1e9)


def tree(p, size_bytes, alpha, gbs):
    return 2 * math.log2(p) * alpha + 2 * size_bytes / (gbs * 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=None, help="fitted latency, microseconds")
    ap.add_argument("--beta-gbs", type=float, default=None, help="fitted bus bandwidth, GB/s")
    # Measured 2026-12-03 (AMD EPYC, 2 vCPUs, Open MPI 4.1.4 over shared memory, TK_PROFILE=1 under mpirun -np 2,
    # the rank that waited least): the MLP's dense/bias (1,024 B) 4.4 us, dense/kernel (802,816 B) 360 us; the
    # CNN's dense/kernel (12,845,056 B) 4.66 ms is the check.
    ap.add_argument("--small", type=float, nargs=2, default=(1024, 4.4e-6), metavar=("BYTES", "SECONDS"),
                    help="a measured small all-reduce (2 ranks)")
    ap.add_argument("--large", type=float, nargs=2, default=(802816, 3.6e-4), metavar=("BYTES", "SECONDS"),
                    help="a measured large all-reduce (2 ranks)")
    ap.add_argument("--check", type=float, nargs=2, default=(12845056, 4.66e-3), metavar=("BYTES", "SECONDS"),
                    help="a third measurement the fit is checked against")
    a = ap.parse_args()
    # Fit alpha and B to the two 2-rank measurements: T = 2 alpha + S / B.
    (s1, t1), (s2, t2) = a.small, a.large
    inv_b = (t2 - t1) / (s2 - s1)
    alpha = (t1 - s1 * inv_b) / 2
    if a.alpha_us is not None:
        alpha = a.alpha_us * 1e-6
    gbs = 1.0 / inv_b / 1e9 if a.beta_gbs is None else a.beta_gbs
    print("calibration (this machine, 2 MPI ranks, shared memory): alpha = %.2f us, bus bandwidth = %.2f GB/s"
          % (alpha * 1e6, gbs))
    for s, t in ((s1, t1), (s2, t2), tuple(a.check)):
        print("  check: %8.0f bytes measured %.1f us, model %.1f us" % (s, t * 1e6, ring(2, s, alpha, gbs) * 1e6))
    print("\nPREDICTION (not measured): NCCL-class links, fp32 gradients")
    print("%-48s %5s %12s %12s %12s %10s" % ("model", "GPUs", "ring (ms)", "tree (ms)", "exposed (ms)", "efficiency"))
    for name, (params, step_s, overlap) in MODELS.items():
        size = 4 * params
        for p, (link_gbs, link_alpha) in LINKS.items():
            t_ring, t_tree = ring(p, size, link_alpha, link_gbs), tree(p, size, link_alpha, link_gbs)
            t = min(t_ring, t_tree)  # NCCL picks the faster algorithm
            backward = step_s * 2 / 3
            exposed = max(0.0, t - overlap * backward)
            print("%-48s %5d %12.3f %12.3f %12.3f %9.0f%%" % (name, p, t_ring * 1e3, t_tree * 1e3, exposed * 1e3,
                                                          100 * step_s / (step_s + exposed)))


if __name__ == "__main__":
    main()
