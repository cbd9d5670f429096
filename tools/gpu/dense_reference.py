"""Dense-attention reference on the GPU machine, for the MSA comparisons of docs/performance.md: PyTorch SDPA
(cuDNN / flash backends, whichever PyTorch picks) with MiniMax-M3's GQA shape (64 query heads, 4 KV heads,
head_dim 128, bf16). Causal prefill of one sequence, and one-token decode over a contiguous KV cache. Timed with
CUDA events after a warm-up, median of the runs; prints one line per shape.

    python3 tools/gpu/dense_reference.py
"""
import torch
import torch.nn.functional as F

HQ, HKV, D = 64, 4, 128


def timed(fn, iters=10):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2] * 1000.0  # us


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for s in (8192, 32768, 131072):
        q = torch.randn(1, HQ, s, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, HKV, s, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, HKV, s, D, device=dev, dtype=torch.bfloat16)
        us = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                   iters=5 if s > 32768 else 10)
        flops = 4.0 * HQ * D * s * (s + 1) / 2
        print(f"dense_prefill S={s}: {us:.1f} us, {flops / us / 1e6:.0f} TFLOP/s")
        del q, k, v
    for L in (8192, 131072):
        for b in (1, 8, 32, 64):
            q = torch.randn(b, HQ, 1, D, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, HKV, L, D, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, HKV, L, D, device=dev, dtype=torch.bfloat16)
            us = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            print(f"dense_decode B={b} L={L}: {us:.1f} us, {2 * b * HKV * L * D * 2 / us / 1e3:.0f} GB/s")
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
