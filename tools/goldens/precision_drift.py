#!/usr/bin/env python3
"""How far transformers in bf16 moves from transformers in fp32 on long prompts: the yardstick of issue #13's
FP8 KV accuracy bar ("FP8 KV must not disagree with BF16 more than transformers in BF16 disagrees with
transformers in FP32 on the same prompts").

Runs on the GPU machine. For the block-128 fixtures (rebuilt in memory by make_goldens.reference_model: same
seeds, same weights) and seeded random prompts of 8K and 16K tokens, one forward of the whole prompt in fp32
(TF32 off) and one with the model cast to bf16 (weights, activations, KV; eager attention), then over the last
TAIL positions: top-1 agreement, the worst relative logit error (L2 norm of the difference / L2 norm of the
fp32 logits) and the share of MSA block selections (layer, index head, position) that differ. The prompts and
the numbers go to OUT.json; tests/gpu/kv_precision_test.cc reads it (M3_PRECISION_DRIFT_JSON) and measures
m3serve's FP8 KV against its bf16 KV on the same prompts and positions.

Usage: python3 tools/goldens/precision_drift.py OUT.json [--lens 8192 16384] [--tail 64]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens as mg  # noqa: E402

FIXTURES = [("m3-tiny-block128", mg.block128_config, 5, False),
            ("m3-tiny-mxfp8-block128", mg.mxfp8_block128_config, 6, True)]


def selection_recorder(model, tail):
    """Forward hooks on the MSA indexers: per layer, the selected blocks of the last `tail` query positions,
    sorted, as a nested list [head][position] (whatever form the indexer returns them in)."""
    records, hooks = [], []

    def as_selection(out):
        cands = list(out) if isinstance(out, (tuple, list)) else [out]
        for t in cands:
            if torch.is_tensor(t) and not t.is_floating_point() and t.dtype != torch.bool and t.dim() == 4:
                sel = t[0, :, -tail:, :].sort(dim=-1).values  # [heads, tail, topk]
                return sel.tolist(), f"indices {tuple(t.shape)}"
        for t in cands:  # a mask over blocks: [B, H, S, n_blocks] (bool, or additive with -inf off)
            if torch.is_tensor(t) and t.dim() == 4:
                on = t if t.dtype == torch.bool else torch.isfinite(t) & (t > -1e30)
                m = on[0, :, -tail:, :]
                return [[torch.nonzero(m[h, i]).flatten().tolist() for i in range(m.shape[1])]
                        for h in range(m.shape[0])], f"mask {tuple(t.shape)} {t.dtype}"
        raise RuntimeError(f"indexer output not understood: {[type(t) for t in cands]}")

    def hook(mod, inp, out):
        sel, form = as_selection(out)
        records.append(sel)
        if len(records) == 1:
            lens = sorted({len(x) for head in sel for x in head})
            print("   indexer output:", form, "- blocks per selection:", lens, flush=True)

    for m in model.modules():
        if type(m).__name__.endswith("Indexer"):
            hooks.append(m.register_forward_hook(hook))
    if not hooks:
        raise RuntimeError("no MSA indexer module found")
    return records, hooks


@torch.no_grad()
def forward(model, prompt, tail):
    records, hooks = selection_recorder(model, tail)
    out = model(input_ids=torch.tensor([prompt], device=mg.DEV), use_cache=False)
    for h in hooks:
        h.remove()
    return out.logits[0, -tail:].float(), records


def drift(ref_logits, ref_sel, logits, sel):
    top1 = int((ref_logits.argmax(-1) == logits.argmax(-1)).sum())
    err = float(((logits - ref_logits).norm(dim=-1) / ref_logits.norm(dim=-1)).max())
    total = changed = 0
    for la, lb in zip(ref_sel, sel):
        for ha, hb in zip(la, lb):
            for a, b in zip(ha, hb):
                total += 1
                changed += a != b
    return {"top1_same": top1, "worst_rel_error": err, "selections": total, "selections_changed": changed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--lens", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--tail", type=int, default=64)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(2613)
    result = {"tail": args.tail, "transformers": __import__("transformers").__version__, "torch": torch.__version__,
              "fixtures": []}
    for name, cfg, seed, mxfp8 in FIXTURES:
        print(f"== {name}", flush=True)
        model = mg.reference_model(cfg(), seed, mxfp8)
        vocab = cfg()["text_config"]["vocab_size"]
        prompts = [mg.rand_prompt(gen, n, vocab) for n in args.lens]
        refs = [forward(model, p, args.tail) for p in prompts]  # fp32 first: the cast to bf16 is one-way
        model.to(torch.bfloat16)
        entries = []
        for p, (ref_logits, ref_sel) in zip(prompts, refs):
            logits, sel = forward(model, p, args.tail)
            d = drift(ref_logits, ref_sel, logits, sel)
            d["ref_top1"] = ref_logits.argmax(-1).tolist()
            print(f"   {len(p)} tokens: bf16 vs fp32 top-1 {d['top1_same']}/{args.tail}, worst rel error "
                  f"{d['worst_rel_error']:.4f}, selections changed {d['selections_changed']}/{d['selections']}",
                  flush=True)
            entries.append({"prompt": p, "bf16_vs_fp32": d})
            torch.cuda.empty_cache()
        result["fixtures"].append({"name": name, "prompts": entries})
        del model
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
