#!/usr/bin/env python3
"""Writes the vision fixtures: test images, a tiny random MiniMax-M3 VL checkpoint (m3-tiny-vl, released tensor
names) and what the reference computes from them, for tests/media and tests/golden.

Runs on the GPU machine (transformers 5.17, torchvision, Pillow). References:
- decoding: Pillow's Image.open(f).convert("RGB");
- preprocessing: transformers' MiniMaxM3VLImageProcessor (torchvision backend), the resize also on its own
  (torchvision's bicubic antialias resize of the uint8 image at smart_resize's size, as the processor calls it);
- the vision tower, projector and merger and the text model: MiniMaxM3SparseForConditionalGeneration, eager
  attention, fp32 compute, TF32 off, bf16-rounded weights, one image per call (the published engines attend
  within each image; transformers runs several images of one call as one sequence).
The vision RoPE of transformers 5.17 (MiniMaxM3VLVisionRotaryEmbedding) rotates all head dims with (t, h) angles
and ignores w; the released model's layout (spec/model.md 4.2, vLLM / SGLang / NeMo / llama.cpp) is T|H|W bands of
2 * ((head_dim // 3) // 2) dims each. The script patches the reference to the released layout (spec_rotary).

Usage: python3 tools/goldens/make_vision_goldens.py OUT_DIR  (writes OUT_DIR/vision/{images,goldens.safetensors},
OUT_DIR/models/m3-tiny-vl/, OUT_DIR/goldens/m3-tiny-vl.json)
"""
import copy
import io
import json
import os
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from torchvision.transforms.v2 import functional as tvF

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens as mg  # noqa: E402
from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as mm  # noqa: E402
from transformers.models.minimax_m3_vl.image_processing_minimax_m3_vl import (  # noqa: E402
    MiniMaxM3VLImageProcessor, smart_resize)

DEV = mg.DEV
IMAGE_ID, VIDEO_ID, START_ID, END_ID = 500, 501, 502, 503  # in the tiny vocabulary of 512

TINY_VL_VISION = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
    "patch_size": 14, "image_size": 2016, "num_channels": 3, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
    "model_type": "clip_vision_model", "projection_dim": 48, "rope_theta": 10000.0, "vision_segment_max_frames": 4,
    "img_token_compression_config": {"image_token_compression_method": "patch_merge", "spatial_merge_size": 2,
                                     "temporal_patch_size": 2},
}


def spec_rotary(self, x, position_ids):
    """The released 3D RoPE: angles [t * f | h * f | w * f], f_j = theta^(-2j/a), a = 2 * ((d // 3) // 2) with
    d = 2 * (head_dim // 2), cos/sin duplicated for NeoX rotate-half over the first 3a dims."""
    hd = self.config.hidden_size // self.config.num_attention_heads
    a = 2 * ((2 * (hd // 2) // 3) // 2)
    theta = self.config.rope_parameters["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, a, 2, dtype=torch.float32, device=x.device) / a))
    pos = position_ids.float()
    freqs = torch.cat([pos[:, 0:1] * inv, pos[:, 1:2] * inv, pos[:, 2:3] * inv], dim=-1)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


mm.MiniMaxM3VLVisionRotaryEmbedding.forward = spec_rotary
_randomize = mg.randomize


def randomize(model, gen):
    """make_goldens' weights, with the vision LayerNorms near identity (1 + noise) instead of near zero, so that
    the tower's features carry the image."""
    _randomize(model, gen)
    for name, p in model.named_parameters():
        if name.startswith("model.vision_tower.") and ("layer_norm" in name or "layrnorm" in name):
            with torch.no_grad():
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)


mg.randomize = randomize


def make_images(gen):
    """name -> (file name, encoded bytes). Noise exercises every tap of the resize filter; the large one is smooth
    so that its PNG stays small."""
    def noise(h, w, c=3):
        return (torch.rand((h, w, c), generator=gen) * 256).to(torch.uint8).numpy()

    def encode(arr, fmt, **kw):
        buf = io.BytesIO()
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[arr.shape[2]] if arr.ndim == 3 else "L"
        Image.fromarray(arr.squeeze(-1) if arr.ndim == 3 and arr.shape[2] == 1 else arr, mode).save(buf, fmt, **kw)
        return buf.getvalue()

    yy, xx = np.mgrid[0:900, 0:700].astype(np.float32)
    smooth = np.stack([128 + 100 * np.sin(xx / 37.0 + c) * np.cos(yy / 53.0 - c) for c in range(3)], -1)
    smooth = np.clip(smooth, 0, 255).astype(np.uint8)
    return {
        "square": ("square.png", encode(noise(56, 56), "PNG")),            # 56 x 56: resized at scale 1
        "wide": ("wide.png", encode(noise(60, 100), "PNG")),               # 100 x 60 -> 112 x 56 (down / up)
        "small_rgba": ("small_rgba.png", encode(noise(20, 30, 4), "PNG")),  # 30 x 20 -> 84 x 56 (min_pixels)
        "grey_jpeg": ("grey.jpg", encode(noise(90, 90, 1), "JPEG", quality=90)),
        "photo_jpeg": ("photo.jpg", encode(noise(70, 130), "JPEG", quality=85)),
        "lossless_webp": ("lossless.webp", encode(noise(48, 64), "WEBP", lossless=True)),
        "large": ("large.png", encode(smooth, "PNG", optimize=True)),      # 700 x 900 -> max_pixels
    }


def tiny_vl_config():
    text = mg.released_text_config(hidden=64, heads=8, kv_heads=4, head_dim=32, rotary_dim=16, experts=8,
                                   topk_experts=2, inter=32, shared_inter=32, dense_inter=128, vocab=512,
                                   dense_layers=1, sparse_layers=2, block=8, topk_blocks=3)
    cfg = mg.vl_config(text)
    cfg["vision_config"] = copy.deepcopy(TINY_VL_VISION)
    cfg["projector_hidden_size"] = 48
    cfg["image_token_index"], cfg["video_token_index"] = IMAGE_ID, VIDEO_ID
    return cfg


def released_vision_names(tensors):
    """save_pretrained's vision names -> the released ones (spec 2.3)."""
    out = {}
    for k, v in tensors.items():
        if k.startswith("vision_tower."):
            k = k.replace(".block_sparse_moe.fc", ".mlp.fc")
        out[k] = v
    return out


@torch.no_grad()
def main():
    out_dir = sys.argv[1]
    gen = torch.Generator().manual_seed(4321)
    img_dir = os.path.join(out_dir, "vision", "images")
    os.makedirs(img_dir, exist_ok=True)
    images = make_images(gen)

    cfg = tiny_vl_config()
    mg.build("m3-tiny-vl", cfg, 7, [mg.rand_prompt(gen, 20, 500)], 4, out_dir, "released")
    mdir = os.path.join(out_dir, "models", "m3-tiny-vl")
    from safetensors.torch import load_file
    path = os.path.join(mdir, "model.safetensors")
    save_file(released_vision_names(load_file(path)), path, metadata={"format": "pt"})
    model = mg.reference_model(cfg, 7)

    proc = MiniMaxM3VLImageProcessor()
    out, meta = {}, {"images": {}, "processor": dict(proc.size)}
    prompts = []
    for name, (fname, data) in images.items():
        with open(os.path.join(img_dir, fname), "wb") as f:
            f.write(data)
        pil = Image.open(io.BytesIO(data)).convert("RGB")
        decoded = torch.from_numpy(np.asarray(pil).copy())
        H, W = decoded.shape[:2]
        h, w = smart_resize(H, W, factor=28, min_pixels=proc.size["shortest_edge"],
                            max_pixels=proc.size["longest_edge"])
        resized = tvF.resize(decoded.permute(2, 0, 1).contiguous(), [h, w],
                             interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
        feats = proc(images=[pil], return_tensors="pt")
        pv, grid = feats["pixel_values"].float(), feats["image_grid_thw"]
        assert list(grid[0]) == [1, h // 14, w // 14], (grid, h, w)
        # The processor's values are the normalised resize (this script's resize is the processor's).
        mean = torch.tensor(proc.image_mean) * 255.0
        std = torch.tensor(proc.image_std) * 255.0
        norm = (resized.float() - mean[:, None, None]) / std[:, None, None]
        assert abs(float(norm.sum()) - float(pv.sum()) / 2) < 1e-2 * norm.numel(), name
        if name != "large":  # its PNG is decoded exactly by any PNG decoder; 1.9 MB of pixels spared
            out[f"{name}.decoded"] = decoded.contiguous()
        out[f"{name}.resized"] = resized.permute(1, 2, 0).contiguous()
        out[f"{name}.grid"] = grid[0].float()
        n = pv.shape[0]
        if name in ("square", "wide", "small_rgba"):  # the others' values follow from .resized the same way
            out[f"{name}.pixel_values"] = pv
        elif name == "large":  # a few rows (all of it would be 10 MB)
            rows = torch.tensor([0, 1, n // 2, n - 1])
            out[f"{name}.pixel_rows"] = pv[rows]
            out[f"{name}.pixel_row_ids"] = rows.float()
        vt = model.model.vision_tower(pixel_values=pv.to(DEV), grid_thw=grid.to(DEV))
        tower = vt.last_hidden_state.squeeze(0)
        out[f"{name}.tower"] = tower.float().cpu()
        feats_llm = model.model.multi_modal_projector(tower)
        out[f"{name}.features"] = feats_llm.float().cpu()
        meta["images"][name] = {"file": fname, "size": [W, H], "resized": [w, h], "grid": grid[0].tolist(),
                                "tokens": int(feats_llm.shape[0])}
        print(f"   {name}: {W}x{H} -> {w}x{h}, grid {grid[0].tolist()}, {feats_llm.shape[0]} tokens", flush=True)

        if name in ("wide", "small_rgba", "photo_jpeg"):
            before = mg.rand_prompt(gen, 9, 500)
            after = mg.rand_prompt(gen, 6, 500)
            ids = before + [START_ID] + [IMAGE_ID] * int(feats_llm.shape[0]) + [END_ID] + after
            prompts.append((name, ids, pv, grid))

    results = []
    for name, ids, pv, grid in prompts:
        res = run_with_image(model, ids, pv, grid, 8)
        res["image"] = name
        results.append(res)
        print(f"   generate with {name}: {res['output_token_ids']} (min margin "
              f"{min(s['margin'] for s in res['steps']):.4f})", flush=True)

    save_file(out, os.path.join(out_dir, "vision", "goldens.safetensors"), metadata={"format": "pt"})
    meta.update({"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                 "rope": "released 3D layout (T|H|W bands), reference patched: see make_vision_goldens.py"})
    with open(os.path.join(out_dir, "vision", "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(out_dir, "goldens", "m3-tiny-vl.json")) as f:
        g = json.load(f)
    g["image_prompts"] = results
    g["meta"]["image_token_id"], g["meta"]["vision_start_id"], g["meta"]["vision_end_id"] = IMAGE_ID, START_ID, END_ID
    with open(os.path.join(out_dir, "goldens", "m3-tiny-vl.json"), "w") as f:
        json.dump(g, f)


@torch.no_grad()
def run_with_image(model, prompt, pv, grid, max_tokens):
    return run_greedy(model, prompt, max_tokens, pixel_values=pv.to(DEV), image_grid_thw=grid.to(DEV))


@torch.no_grad()
def run_greedy(model, prompt, max_tokens, **media):
    """Greedy generation with the image or video inputs `media` (the model's keyword arguments) in the prompt."""
    ids = torch.tensor([prompt], device=DEV)
    out = model(input_ids=ids, use_cache=True, **media)
    res = {"prompt_token_ids": prompt, "max_tokens": max_tokens, "output_token_ids": [], "steps": []}
    res["prefill_last_logits"] = [round(float(x), 7) for x in out.logits[0, -1].tolist()]
    past, logits = out.past_key_values, out.logits[0, -1]
    for _ in range(max_tokens):
        vals, idx = torch.topk(logits.float(), mg.TOPN)
        res["steps"].append({"top_ids": idx.tolist(), "top_logits": [round(float(v), 7) for v in vals.tolist()],
                             "margin": float(vals[0] - vals[1])})
        nxt = int(idx[0])
        res["output_token_ids"].append(nxt)
        out = model(input_ids=torch.tensor([[nxt]], device=DEV), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return res


if __name__ == "__main__":
    main()
