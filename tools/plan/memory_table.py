#!/usr/bin/env python3
"""Paper memory plan of the full MiniMax-M3 (spec/model.md widths) per GPU at TP 1/2/4/8 on H100 / H200.

Per rank, as m3serve lays the model out (config/shard_layout.h, model/weight_layout.cc): query heads, MLP and
expert widths, o-projection columns and vocabulary rows split t ways; KV heads split up to 4 ranks and
replicated beyond; the index-key projection, norms and the fp32 router whole on every rank. Linear weights are
bf16 (2 B) or MXFP8 (1 B + one e8m0 scale per 32: 1.03125 B); the embedding and LM head stay bf16 (the MXFP8
checkpoint's ignored_layers). KV per token: K and V of the rank's KV heads in all 60 layers (bf16, or with
--kv-cache-dtype fp8 e4m3 plus one fp32 scale per KV head each) plus the MSA index key (128 bf16, in both) in
the 57 MSA layers. Activations + workspace: 5.2 GB, the startup profile of the
one-GPU full-width model at --max-num-batched-tokens 8192 / 64 decode sequences (docs/performance.md), taken
whole on every rank (conservative: TP divides most of it), plus FP8's two widening slabs. The KV pool gets
--gpu-memory-utilization 0.9 of the device minus the rest, as the startup plan gives it.

Usage: python3 tools/plan/memory_table.py   (prints the markdown table of docs/performance.md)
"""

H, HEADS, KV, D, VOCAB = 6144, 64, 4, 128, 200064
DENSE_I, EXPERT_I, SHARED_I, E = 12288, 3072, 3072, 128
LAYERS, DENSE_LAYERS, IDX_D = 60, 3, 128
ACT_GB = 5.2
GPUS = {"H100 80GB": 81559 * 2**20, "H200 141GB": 143771 * 2**20}  # cudaMemGetInfo totals on the lent machines
UTIL = 0.9


def per_rank(tp, fp8):
    lin = 1 + 1 / 32 if fp8 else 2.0
    hq, hkv = HEADS // tp, max(1, KV // tp)
    lin_params = other = 0.0
    for layer in range(LAYERS):
        msa = layer >= DENSE_LAYERS
        lin_params += (hq + 2 * hkv) * D * H + H * hq * D  # q k v o
        if msa:
            lin_params += hkv * IDX_D * H + IDX_D * H  # index q (one head per KV group), index k (whole)
            lin_params += E * 3 * (EXPERT_I // tp) * H + 3 * (SHARED_I // tp) * H
            other += 4.0 * E * H + 4 * E  # fp32 router and bias
        else:
            lin_params += 3 * (DENSE_I // tp) * H
    vocab_rows = -(-VOCAB // tp)
    weights = lin * lin_params + other + 2.0 * 2 * vocab_rows * H  # + embedding and LM head
    index = (LAYERS - DENSE_LAYERS) * IDX_D * 2
    kv_token = LAYERS * 2 * hkv * D * 2 + index
    kv_token_fp8 = LAYERS * 2 * hkv * (D + 4) + index
    widen = (2 * (2 * DENSE_I // tp) * H + 2 * (2 * EXPERT_I // tp) * H) if fp8 else 0
    return weights, kv_token, kv_token_fp8, ACT_GB * 1e9 + widen


def main():
    print("| GPUs (TP) | linear weights | weights / GPU | KV / token / GPU: bf16 KV, FP8 KV | " + " | ".join(
        f"{g}: KV tokens that fit (bf16 KV / FP8 KV)" for g in GPUS) + " |")
    print("|---|---|---|---|" + "---|" * len(GPUS))
    for tp in (1, 2, 4, 8):
        for fp8 in (False, True):
            w, kv, kv8, act = per_rank(tp, fp8)
            cells = []
            for total in GPUS.values():
                free = UTIL * total - w - act
                cells.append("does not fit" if free <= 0 else f"{free / kv / 1e6:.2f} M / {free / kv8 / 1e6:.2f} M")
            print(f"| {tp} | {'FP8 (MXFP8)' if fp8 else 'BF16'} | {w / 1e9:.1f} GB | {kv / 1e3:.1f} KB, "
                  f"{kv8 / 1e3:.1f} KB | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
