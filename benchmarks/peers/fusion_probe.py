"""What the eager ViT step's non-matmul kernels cost, and what fusing them could save.

Issue 24 asks colo to beat compiled timm by fusing the kernels around the matmuls. Before a kernel
is written, this probe times, at one ViT's shapes (bf16, batch x 197 token rows), each eager ATen
operation colo runs today beside the same operation compiled by torch.compile (Inductor's fused
Triton kernel: what the compiled peer pays) and the memory-bound floor (the bytes it must move at
the device's copy bandwidth, measured here by a device-to-device copy):

  GELU forward / backward (exact erf)        residual add + LayerNorm forward (and apart)
  LayerNorm input gradient (+ residual grad)  attention forward + backward per SDPA backend
                                              (flash, efficient, cuDNN) and the qkv-gradient stack

  python3 benchmarks/peers/fusion_probe.py [--model base|large] [--batch 256]
"""
import argparse

import torch
import torch.nn.functional as F

from backward_reduction_probe import median_ms  # CUDA-event median, this directory's probes share it


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["base", "large"], default="base")
    parser.add_argument("--batch", type=int, default=0, help="default: 256 for base, 128 for large")
    args = parser.parse_args()
    dim, heads, depth = (768, 12, 12) if args.model == "base" else (1024, 16, 24)
    batch = args.batch or (256 if args.model == "base" else 128)
    tokens, hidden = 197, 4 * dim
    rows = batch * tokens
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(0)

    big = torch.empty(1 << 28, device=dev, dtype=torch.uint8)
    big2 = torch.empty_like(big)
    copy_ms = median_ms(lambda: big2.copy_(big))
    bw = 2 * big.numel() / copy_ms / 1e9  # TB/s, read + write
    print(f"PROBE device copy bandwidth {bw:.2f} TB/s ({args.model}, batch {batch}, {rows} rows, depth {depth})")

    def report(name, ms, bytes_moved, calls):
        floor = bytes_moved / bw / 1e9
        print(f"PROBE {name:<44} {ms * 1000:8.1f} us  {bytes_moved / ms / 1e9:5.2f} TB/s  floor {floor * 1000:7.1f} us"
              f"  x{calls}/step: {ms * calls:6.2f} ms (floor {floor * calls:5.2f})", flush=True)

    def both(name, eager, args_, bytes_moved, calls):
        report(name + " eager", median_ms(lambda: eager(*args_)), bytes_moved, calls)
        compiled = torch.compile(eager, dynamic=False)
        report(name + " compiled", median_ms(lambda: compiled(*args_)), bytes_moved, calls)

    e = 2  # bytes per bf16 element
    h = torch.randn(rows, hidden, device=dev, dtype=bf16)
    gh = torch.randn_like(h)
    bias = torch.randn(hidden, device=dev, dtype=bf16)
    both("GELU forward", lambda x: F.gelu(x), (h,), 2 * h.numel() * e, depth)
    both("bias + GELU forward", lambda x, b: F.gelu(x + b), (h, bias), 2 * h.numel() * e, depth)
    both("GELU backward", lambda g, x: torch.ops.aten.gelu_backward(g, x), (gh, h), 3 * h.numel() * e, depth)

    x = torch.randn(rows, dim, device=dev, dtype=bf16)
    r = torch.randn_like(x)
    w = torch.randn(dim, device=dev, dtype=bf16)
    b = torch.randn(dim, device=dev, dtype=bf16)
    n = x.numel() * e
    both("residual add", lambda a, c: a + c, (x, r), 3 * n, 2 * depth)
    both("LayerNorm forward", lambda a: F.layer_norm(a, (dim,), w, b, 1e-6), (x,), 2 * n, 2 * depth)
    both("residual add + LayerNorm forward", lambda a, c: (lambda s: (s, F.layer_norm(s, (dim,), w, b, 1e-6)))(a + c),
         (x, r), 4 * n, depth)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, (dim,), w, b, 1e-6)
    both("LayerNorm input gradient", lambda g, a: torch.ops.aten.native_layer_norm_backward(
        g, a, (dim,), mean, rstd, w, b, (True, False, False))[0], (r, x), 3 * n, 2 * depth)
    both("LayerNorm input gradient + residual grad", lambda g, a, d: d + torch.ops.aten.native_layer_norm_backward(
        g, a, (dim,), mean, rstd, w, b, (True, False, False))[0], (r, x, r), 4 * n, depth)

    # Attention on views of a packed qkv, as colo and timm make them.
    qkv_shape = (batch, tokens, 3, heads, dim // heads)
    for backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
        qkv = torch.randn(qkv_shape, device=dev, dtype=bf16, requires_grad=True)
        go = torch.randn(batch, heads, tokens, dim // heads, device=dev, dtype=bf16)

        def step():
            q, k, v = qkv.unbind(2)
            with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)):
                out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            out.backward(go)
            qkv.grad = None

        def forward_only():
            with torch.no_grad():
                q, k, v = qkv.unbind(2)
                with torch.nn.attention.sdpa_kernel(getattr(torch.nn.attention.SDPBackend, backend)):
                    F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

        try:
            fwd = median_ms(forward_only)
            total = median_ms(step)
            print(f"PROBE attention {backend:<20} forward {fwd * 1000:8.1f} us  forward+backward {total * 1000:8.1f} us"
                  f"  x{depth}/step: {total * depth:6.2f} ms", flush=True)
        except RuntimeError as err:
            print(f"PROBE attention {backend:<20} unavailable: {str(err).splitlines()[0]}", flush=True)
    parts = [torch.randn(batch, heads, tokens, dim // heads, device=dev, dtype=bf16) for _ in range(3)]
    out = torch.empty(qkv_shape, device=dev, dtype=bf16)
    report("qkv gradient stack", median_ms(lambda: torch.stack([p.transpose(1, 2) for p in parts], 2, out=out)),
           2 * out.numel() * e, depth)


if __name__ == "__main__":
    main()
