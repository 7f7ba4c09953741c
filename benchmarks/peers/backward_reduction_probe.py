"""How fast ATen computes the two column reductions of a ViT backward, and what else could.

colo's ViT-B/16 step (batch 256, bf16, one H200) spends ~3.4 ms in the bias-gradient sums of its
linear layers (`aten::sum` under AddmmBackward0) and ~5.4 ms in LayerNorm's weight/bias-gradient
kernel (`GammaBetaBackward`), both reductions over the 50432 token rows (RESULTS.md: 2026-11-23,
9e48602). This probe times, for those shapes, the reduction ATen uses and alternatives that need
no custom kernel, and prints each one's effective bandwidth, so a rewrite is judged before it is
written:

  bias grad      g.sum(0)  |  ones @ g (cuBLAS)  |  g.t() @ ones (mv)
  LayerNorm bwd  native_layer_norm_backward with all three outputs  |  dx only  |  dx only, then
                 dbeta = g.sum(0) and dgamma = (g * x_hat).sum(0) with x_hat recomputed  |  the same
                 with x_hat from LayerNorm's forward kernel and the sums as matrix-vector products

  python3 benchmarks/peers/backward_reduction_probe.py [--rows 50432]
"""
import argparse

import torch


def median_ms(fn, reps=25):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def report(name, ms, bytes_moved, baseline=None):
    extra = f"  {baseline / ms:.2f}x the first" if baseline else ""
    print(f"PROBE {name:<58} {ms * 1000:8.1f} us  {bytes_moved / ms / 1e9:6.2f} TB/s{extra}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=256 * 197, help="tokens per step (batch x 197)")
    args = parser.parse_args()
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    m = args.rows
    torch.manual_seed(0)

    ones = torch.ones(m, device=dev, dtype=bf16)
    for n in (768, 2304, 3072):  # proj/fc2, qkv, fc1 outputs
        g = torch.randn(m, n, device=dev, dtype=bf16)
        size = g.numel() * g.element_size()
        base = median_ms(lambda: g.sum(0))
        report(f"bias grad {m}x{n}: g.sum(0)", base, size)
        report(f"bias grad {m}x{n}: ones[1,M] @ g", median_ms(lambda: torch.matmul(ones.view(1, m), g)), size, base)
        report(f"bias grad {m}x{n}: mv(g.t(), ones)", median_ms(lambda: torch.mv(g.t(), ones)), size, base)
        ref = g.float().sum(0)
        worst = max((g.sum(0).float() - ref).abs().max().item(),
                    (torch.mv(g.t(), ones).float() - ref).abs().max().item())
        print(f"PROBE   worst |difference| to an fp32 sum: {worst:.3g} (|sum| ~ {ref.abs().mean().item():.3g})")

    n = 768
    x = torch.randn(m, n, device=dev, dtype=bf16)
    g = torch.randn(m, n, device=dev, dtype=bf16)
    w = torch.randn(n, device=dev, dtype=bf16)
    b = torch.randn(n, device=dev, dtype=bf16)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-6)
    size = 2 * x.numel() * x.element_size()  # g and x read once: the floor of every variant
    ln_bwd = torch.ops.aten.native_layer_norm_backward
    full = median_ms(lambda: ln_bwd(g, x, [n], mean, rstd, w, b, [True, True, True]))
    report(f"LayerNorm backward {m}x{n}: dx, dgamma, dbeta", full, size)
    dx_only = median_ms(lambda: ln_bwd(g, x, [n], mean, rstd, w, b, [True, False, False]))
    report(f"LayerNorm backward {m}x{n}: dx only", dx_only, size, full)
    report(f"LayerNorm backward {m}x{n}: dgamma, dbeta only", median_ms(lambda: ln_bwd(g, x, [n], mean, rstd, w, b, [False, True, True])), size, full)

    def split():
        dx = ln_bwd(g, x, [n], mean, rstd, w, b, [True, False, False])[0]
        dbeta = g.sum(0)
        dgamma = (g * ((x - mean) * rstd)).sum(0)
        return dx, dgamma, dbeta

    report(f"LayerNorm backward {m}x{n}: dx only + two sums", median_ms(split), size, full)

    def split_bf16():
        # x_hat in the input's dtype from LayerNorm's own forward kernel (no affine), then the two
        # column sums as cuBLAS matrix-vector products.
        dx = ln_bwd(g, x, [n], mean, rstd, w, b, [True, False, False])[0]
        x_hat = torch.ops.aten.native_layer_norm(x, [n], None, None, 1e-6)[0]
        dgamma = torch.mv((g * x_hat).t(), ones)
        dbeta = torch.mv(g.t(), ones)
        return dx, dgamma, dbeta

    report(f"LayerNorm backward {m}x{n}: dx only + x_hat, g*x_hat, two mv", median_ms(split_bf16), size, full)
    _, dgamma_ref, dbeta_ref = ln_bwd(g, x, [n], mean, rstd, w, b, [True, True, True])
    _, dgamma, dbeta = split()
    print(f"PROBE   two sums: dgamma max rel diff {((dgamma.float() - dgamma_ref.float()).abs().max() / dgamma_ref.float().abs().max()).item():.3g}, "
          f"dbeta {((dbeta.float() - dbeta_ref.float()).abs().max() / dbeta_ref.float().abs().max()).item():.3g}")
    _, dgamma, dbeta = split_bf16()
    print(f"PROBE   x_hat and mv: dgamma max rel diff {((dgamma.float() - dgamma_ref.float()).abs().max() / dgamma_ref.float().abs().max()).item():.3g}, "
          f"dbeta {((dbeta.float() - dbeta_ref.float()).abs().max() / dbeta_ref.float().abs().max()).item():.3g}")


if __name__ == "__main__":
    main()
