#!/usr/bin/env python3
"""Writes tiny random MiniMax-M3 checkpoints in the released format plus golden outputs from HF transformers.

Runs on the GPU machine (transformers 5.17 with models/minimax_m3_vl, torch with CUDA). The reference is the
transformers model with eager attention, fp32 compute, TF32 off, on weights rounded to bf16 (router kept fp32).
Every fixture is written by this script, never by m3serve, so the C++ tests compare against an independent oracle.

Usage: python3 tools/goldens/make_goldens.py OUT_DIR [NAME ...]   (writes OUT_DIR/models/<name>/ and
OUT_DIR/goldens/<name>.json for every fixture, or the named ones)
"""
import copy
import json
import math
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import MiniMaxM3VLConfig
from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as mm

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOPN = 16  # logits recorded per step

TINY_VISION = {
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
    "patch_size": 14, "image_size": 56, "num_channels": 3, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
    "model_type": "clip_vision_model", "projection_dim": 64, "rope_theta": 10000.0,
    "img_token_compression_config": {"image_token_compression_method": "patch_merge", "spatial_merge_size": 2,
                                     "temporal_patch_size": 2},
}


def released_text_config(*, hidden, heads, kv_heads, head_dim, rotary_dim, dense_layers, sparse_layers, experts,
                         topk_experts, inter, shared_inter, dense_inter, vocab, block, topk_blocks, index_dim=None,
                         routed_scale=2.0, theta=5e6):
    """A text_config in the spelling of the released MiniMax-M3 config.json (sparse_attention_config, moe_layer_freq)."""
    n = dense_layers + sparse_layers
    freq = [0] * dense_layers + [1] * sparse_layers
    return {
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "hidden_size": hidden, "num_hidden_layers": n, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "vocab_size": vocab,
        "max_position_embeddings": 1048576, "rms_norm_eps": 1e-6, "use_gemma_norm": True,
        "attention_output_gate": False, "rope_theta": theta, "rotary_dim": rotary_dim,
        "partial_rotary_factor": rotary_dim / head_dim, "hidden_act": "swigluoai", "use_qk_norm": True,
        "qk_norm_type": "per_head", "tie_word_embeddings": False, "dense_intermediate_size": dense_inter,
        "intermediate_size": inter, "shared_intermediate_size": shared_inter, "num_local_experts": experts,
        "num_experts_per_tok": topk_experts, "n_shared_experts": 1, "scoring_func": "sigmoid",
        "use_routing_bias": True, "routed_scaling_factor": routed_scale, "moe_layer_freq": freq,
        "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "num_mtp_modules": 0,
        "sparse_attention_config": {
            "use_sparse_attention": True, "sparse_attention_freq": freq, "sparse_disable_index_value": freq,
            "sparse_index_dim": index_dim or head_dim, "sparse_num_index_heads": kv_heads,
            "sparse_topk_blocks": topk_blocks, "sparse_block_size": block, "sparse_score_type": "max",
            "sparse_init_block": 0, "sparse_local_block": 1,
        },
    }


def vl_config(text):
    return {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"], "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16", "image_token_index": 200025, "video_token_index": 200026,
        "projector_hidden_size": text["hidden_size"], "projector_hidden_act": "gelu",
        "multimodal_projector_bias": True, "vision_feature_layer": -1, "vision_feature_select_strategy": "full",
        "text_config": text, "vision_config": TINY_VISION,
    }


def randomize(model, gen):
    """Fills every parameter with non-trivial random values: non-zero norm offsets and routing bias, gate/up
    projections wide enough that SwiGLU-OAI hits its +-7 clamps, small down projections to keep the stream sane."""
    for name, p in model.named_parameters():
        shape = p.shape
        if name.endswith("norm.weight") or "layernorm" in name or "layrnorm" in name:
            std = 0.2
        elif "e_score_correction_bias" in name:
            std = 0.3
        elif "embed_tokens" in name:
            std = 1.0
        elif "lm_head" in name:
            std = 0.3
        elif "experts.gate_up_proj" in name or "gate_up_proj" in name:
            std = 1.0
        elif "down_proj" in name:
            std = 0.05
        elif "mlp.gate.weight" in name:
            std = 0.3
        elif "indexer" in name:
            std = 0.3
        elif "self_attn" in name:
            std = 0.2
        else:
            std = 0.05
        with torch.no_grad():
            p.copy_(torch.randn(shape, generator=gen, dtype=torch.float32) * std)
    for name, b in model.named_buffers():
        if "e_score_correction_bias" in name:
            with torch.no_grad():
                b.copy_(torch.randn(b.shape, generator=gen) * 0.3)


def is_router(name):
    return name.endswith("mlp.gate.weight") or "e_score_correction_bias" in name


def round_to_bf16(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not is_router(name):
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


def save_hf(model, path, shard=None):
    """save_pretrained with bf16 weights and an fp32 router, as the release ships them."""
    m = copy.deepcopy(model).to(torch.bfloat16)
    for name, p in m.named_parameters():
        if is_router(name):
            p.data = dict(model.named_parameters())[name].data.clone()
    for name, b in m.named_buffers():
        if "e_score_correction_bias" in name:
            b.data = dict(model.named_buffers())[name].data.clone().float()
    kw = {"max_shard_size": shard} if shard else {}
    m.save_pretrained(path, safe_serialization=True, **kw)


def read_all_tensors(path):
    tensors = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(path, f)))
    return tensors


def to_released_names(tensors, dense_layers, text_only=False):
    """Dense layers' MLP under mlp.* (as released) instead of save_pretrained's block_sparse_moe.*_proj."""
    out = {}
    for k, v in tensors.items():
        for i in dense_layers:
            pre = f"language_model.model.layers.{i}.block_sparse_moe."
            if k.startswith(pre) and k.split(".")[-2] in ("gate_proj", "up_proj", "down_proj"):
                k = f"language_model.model.layers.{i}.mlp." + k[len(pre):]
        if text_only:
            if not k.startswith("language_model."):
                continue  # vision tower / projector are not part of a text-only checkpoint
            k = k[len("language_model."):]
        out[k] = v.contiguous()
    return out


def write_sharded(tensors, path, nshards):
    os.makedirs(path, exist_ok=True)
    keys = sorted(tensors)
    per = math.ceil(len(keys) / nshards)
    weight_map, total = {}, 0
    for s in range(nshards):
        part = keys[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{nshards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(path, fname), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def quantize_mxfp8(w):
    """MXFP8 of spec 2.2: fp8-e4m3 values and one e8m0 exponent byte per 32 inputs; W = q * 2^(s - 127)."""
    rows, cols = w.shape
    blocks = w.float().reshape(rows, cols // 32, 32)
    amax = blocks.abs().amax(-1).clamp(min=1e-30)
    e = torch.ceil(torch.log2(amax / 448.0)).clamp(-127, 127)
    q = (blocks / torch.pow(2.0, e)[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale = (e + 127).to(torch.uint8)
    deq = (q.float() * torch.pow(2.0, e)[..., None]).reshape(rows, cols)
    return q.reshape(rows, cols), scale, deq


# These also match the MSA index projections (index_q_proj, index_k_proj), which the release quantises too.
MXFP8_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                  "up_proj.weight", "down_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight")


def clamp_probe(model):
    """Fraction of SwiGLU-OAI gate/up inputs beyond the 7.0 clamp in dense MLPs and shared experts."""
    stats = {"n": 0, "gate_hi": 0, "up_out": 0}

    def hook(mod, inp, out):
        g, u = out.chunk(2, dim=-1)
        stats["n"] += g.numel()
        stats["gate_hi"] += int((g > 7).sum())
        stats["up_out"] += int((u.abs() > 7).sum())

    hs = [m.gate_up_proj.register_forward_hook(hook) for m in model.modules() if isinstance(m, mm.MiniMaxM3VLDenseMLP)]
    return stats, hs


@torch.no_grad()
def run_prompt(model, prompt, max_tokens, record_hidden):
    ids = torch.tensor([prompt], device=DEV)
    out = model(input_ids=ids, use_cache=True, output_hidden_states=record_hidden)
    res = {"prompt_token_ids": prompt, "max_tokens": max_tokens, "output_token_ids": [], "steps": []}
    res["prefill_last_logits"] = [round(float(x), 7) for x in out.logits[0, -1].tolist()]
    if record_hidden and getattr(out, "hidden_states", None) is not None:
        # hidden state of the last prompt token after the embedding and after each decoder layer (pre final norm)
        res["hidden_last"] = [[round(float(x), 7) for x in h[0, -1].tolist()] for h in out.hidden_states]
    past = out.past_key_values
    logits = out.logits[0, -1]
    for _ in range(max_tokens):
        vals, idx = torch.topk(logits.float(), TOPN)
        res["steps"].append({"top_ids": idx.tolist(), "top_logits": [round(float(v), 7) for v in vals.tolist()],
                             "margin": float(vals[0] - vals[1])})
        nxt = int(idx[0])
        res["output_token_ids"].append(nxt)
        out = model(input_ids=torch.tensor([[nxt]], device=DEV), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1]
    return res


def build(name, cfg_dict, seed, prompts, max_tokens, out_dir, layout, mxfp8=False):
    print(f"== {name}", flush=True)
    text = cfg_dict["text_config"]
    model = reference_model(cfg_dict, seed)
    tc = model.config.text_config
    ndense = text["moe_layer_freq"].count(0)
    sa = text["sparse_attention_config"]
    assert tc.layer_types == ["full_attention"] * ndense + ["minimax_m3_sparse"] * (tc.num_hidden_layers - ndense), tc.layer_types
    assert tc.mlp_layer_types == ["dense"] * ndense + ["sparse"] * (tc.num_hidden_layers - ndense)
    assert (tc.index_block_size, tc.index_topk_blocks, tc.index_local_blocks, tc.index_n_heads, tc.index_head_dim) == (
        sa["sparse_block_size"], sa["sparse_topk_blocks"], sa["sparse_local_block"], sa["sparse_num_index_heads"],
        sa["sparse_index_dim"]), "transformers parsed the released sparse_attention_config differently"
    print("   rope_parameters:", tc.rope_parameters)

    mdir = os.path.join(out_dir, "models", name)
    tmp = tempfile.mkdtemp()
    save_hf(model, tmp, shard="60KB" if layout == "hf-sharded" else None)
    saved_keys = sorted(read_all_tensors(tmp))
    if layout == "hf-sharded":
        shutil.copytree(tmp, mdir, ignore=shutil.ignore_patterns("generation_config.json"))
    else:
        tensors = read_all_tensors(tmp)
        text_only = layout == "text-only"
        tensors = to_released_names(tensors, range(ndense), text_only=text_only)
        cfg_out = copy.deepcopy(text if text_only else cfg_dict)
        if mxfp8:
            quantize_released(model, tensors)
            cfg_out["quantization_config"] = {"quant_method": "mxfp8", "activation_scheme": "dynamic",
                                              "weight_block_size": [1, 32],
                                              "ignored_layers": ["lm_head", "model.embed_tokens", "vision_tower"]}
        if layout in ("released-sharded", "text-only"):
            write_sharded(tensors, mdir, 3)
        else:
            os.makedirs(mdir, exist_ok=True)
            save_file(tensors, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(mdir, "config.json"), "w") as f:
            json.dump(cfg_out, f, indent=2)
    shutil.rmtree(tmp)

    stats, hooks = clamp_probe(model)
    results = [run_prompt(model, p, max_tokens, record_hidden=(i == len(prompts) - 1)) for i, p in enumerate(prompts)]
    for h in hooks:
        h.remove()
    meta = {"name": name, "layout": layout, "seed": seed, "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "device": DEV,
            "reference": "MiniMaxM3SparseForConditionalGeneration, eager attention, fp32 compute, TF32 off, bf16-rounded weights",
            "clamp_fraction": {"gate_above_7": stats["gate_hi"] / max(1, stats["n"]),
                               "up_outside_7": stats["up_out"] / max(1, stats["n"])},
            "saved_keys_sample": saved_keys[:8] + [k for k in saved_keys if "layers.0." in k or "layers.1." in k][:40]}
    os.makedirs(os.path.join(out_dir, "goldens"), exist_ok=True)
    with open(os.path.join(out_dir, "goldens", name + ".json"), "w") as f:
        json.dump({"meta": meta, "prompts": results}, f)
    print("   clamp:", meta["clamp_fraction"], " min margin:",
          min(s["margin"] for r in results for s in r["steps"]), flush=True)
    return model


def quantize_released(model, tensors):
    """MXFP8 of the released checkpoint's linear weights, in place in `tensors` (values + weight_scale_inv), and the
    dequantised values put into the in-memory reference model."""
    params = {}
    for k in list(tensors):
        if k.endswith(MXFP8_SUFFIXES) and "vision" not in k and "projector" not in k and "patch_merge" not in k:
            q, s, deq = quantize_mxfp8(tensors[k])
            tensors[k] = q
            tensors[k.replace(".weight", ".weight_scale_inv")] = s
            params[k] = deq
    load_dequantized(model, params)


def reference_model(cfg_dict, seed, mxfp8=False):
    """The in-memory reference of a fixture as build() makes it (same seed, same weights), without writing files."""
    config = MiniMaxM3VLConfig(**copy.deepcopy(cfg_dict))
    config._attn_implementation = "eager"
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
        config.text_config._experts_implementation = "eager"
    model = mm.MiniMaxM3SparseForConditionalGeneration(config)
    randomize(model, torch.Generator().manual_seed(seed))
    round_to_bf16(model)
    model = model.to(DEV).float().eval()
    if mxfp8:
        ndense = cfg_dict["text_config"]["moe_layer_freq"].count(0)
        tmp = tempfile.mkdtemp()
        save_hf(model, tmp)
        quantize_released(model, to_released_names(read_all_tensors(tmp), range(ndense), text_only=False))
        shutil.rmtree(tmp)
    return model


def load_dequantized(model, params):
    """Puts MXFP8-dequantized weights into the in-memory reference (released name -> module parameter)."""
    sd = dict(model.named_parameters())
    with torch.no_grad():
        for k, deq in params.items():
            k2 = k.replace("language_model.model.", "model.language_model.")
            k2 = k2.replace("self_attn.index_q_proj", "self_attn.indexer.q_proj").replace(
                "self_attn.index_k_proj", "self_attn.indexer.k_proj")
            parts = k2.split(".")
            if ".experts." in k2 and parts[-2] in ("w1", "w2", "w3"):
                e = int(parts[-3])
                base = k2[:k2.index(".block_sparse_moe.")] + ".mlp.experts."
                if parts[-2] == "w2":
                    sd[base + "down_proj"][e].copy_(deq)
                else:
                    gu = sd[base + "gate_up_proj"]
                    half = gu.shape[1] // 2
                    (gu[e, :half] if parts[-2] == "w1" else gu[e, half:]).copy_(deq)
                continue
            if ".mlp." in k2 or ".shared_experts." in k2:
                base = k2.rsplit(".", 2)[0]
                if ".block_sparse_moe.shared_experts" in base:
                    base = base.replace(".block_sparse_moe.shared_experts", ".mlp.shared_experts")
                proj = parts[-2]
                if proj == "down_proj":
                    sd[base + ".down_proj.weight"].copy_(deq)
                else:
                    gu = sd[base + ".gate_up_proj.weight"]
                    half = gu.shape[0] // 2
                    (gu[:half] if proj == "gate_proj" else gu[half:]).copy_(deq)
                continue
            sd[k2].copy_(deq)


def block128_config():
    """m3-tiny-block128: the real block size 128 and top-16 at head_dim 32 (seed 5)."""
    return vl_config(released_text_config(hidden=64, heads=8, kv_heads=4, head_dim=32, rotary_dim=16, experts=8,
                                          topk_experts=2, inter=32, shared_inter=32, dense_inter=128, vocab=512,
                                          dense_layers=1, sparse_layers=2, block=128, topk_blocks=16))


def mxfp8_block128_config():
    """m3-tiny-mxfp8-block128: MXFP8 at the real head_dim 128, block 128, top-16 (seed 6)."""
    return vl_config(released_text_config(hidden=128, heads=4, kv_heads=2, head_dim=128, rotary_dim=64, experts=8,
                                          topk_experts=2, inter=64, shared_inter=64, dense_inter=128, vocab=512,
                                          dense_layers=1, sparse_layers=2, block=128, topk_blocks=16))


def rand_prompt(gen, n, vocab):
    return torch.randint(0, vocab, (n,), generator=gen).tolist()


def main():
    """make_goldens.py OUT_DIR [NAME ...]: every fixture, or only the named ones (the others' inputs are still
    drawn, so each fixture's prompts do not depend on which are built)."""
    out_dir = sys.argv[1]
    only = set(sys.argv[2:])

    def want(name):
        return not only or name in only

    g = torch.Generator().manual_seed(1234)
    small = dict(hidden=64, heads=8, kv_heads=4, head_dim=32, rotary_dim=16, experts=8, topk_experts=2, inter=32,
                 shared_inter=32, dense_inter=128, vocab=512)
    a = vl_config(released_text_config(**small, dense_layers=1, sparse_layers=3, block=8, topk_blocks=4))
    prompts_a = [rand_prompt(g, n, 512) for n in (1, 7, 8, 33, 64, 121)]
    if want("m3-tiny-msa"):
        build("m3-tiny-msa", a, 1, prompts_a, 12, out_dir, "released")

    b = vl_config(released_text_config(hidden=64, heads=4, kv_heads=2, head_dim=32, rotary_dim=16, experts=16,
                                       topk_experts=4, inter=32, shared_inter=48, dense_inter=96, vocab=384,
                                       dense_layers=2, sparse_layers=2, block=16, topk_blocks=3, routed_scale=2.5,
                                       theta=10000.0))
    prompts_b = [rand_prompt(g, n, 384) for n in (5, 47, 90)]
    if want("m3-tiny-hf-sharded"):
        build("m3-tiny-hf-sharded", b, 2, prompts_b, 10, out_dir, "hf-sharded")

    c = released_text_config(**small, dense_layers=1, sparse_layers=2, block=8, topk_blocks=3)
    prompts_c = [rand_prompt(g, n, 512) for n in (20, 75)]
    if want("m3-tiny-text-sharded"):
        build("m3-tiny-text-sharded", vl_config(c), 3, prompts_c, 10, out_dir, "text-only")
    prompts_mx = [rand_prompt(g, n, 512) for n in (9, 70)]
    if want("m3-tiny-mxfp8"):
        build("m3-tiny-mxfp8", a, 4, prompts_mx, 10, out_dir, "released", mxfp8=True)

    d = block128_config()
    prompts_d = [rand_prompt(g, n, 512) for n in (2600, 2200)]
    if want("m3-tiny-block128"):
        build("m3-tiny-block128", d, 5, prompts_d, 6, out_dir, "released-sharded")

    # MXFP8 at the real head_dim 128, block 128, top-16, with prompts of 3-5K tokens (issue 13).
    e = mxfp8_block128_config()
    prompts_e = [rand_prompt(g, n, 512) for n in (4500, 3100)]
    if want("m3-tiny-mxfp8-block128"):
        build("m3-tiny-mxfp8-block128", e, 6, prompts_e, 6, out_dir, "released-sharded", mxfp8=True)


if __name__ == "__main__":
    main()
