#!/usr/bin/env python3
"""Writes the video goldens: what the reference makes of the fixture videos' sampled frames, for tests/golden and
tests/server.

Runs on the GPU machine (transformers 5.17, torchvision), from the repository root. Inputs, all in the repository:
- tests/fixtures/vision/videos/*.rgb: every frame of each fixture video as the ffmpeg command line decodes it
  (tools/goldens/make_video_fixtures.sh); the frames taken are the ones vLLM's MiniMax-M3 video loader samples at
  1 fps (its compute_frames_index_to_sample), listed in VIDEOS below;
- tests/fixtures/models/m3-tiny-vl: rebuilt in memory by make_vision_goldens (same seed; checked tensor for tensor);
- tests/fixtures/minimax-m3: the real tokenizer.
References:
- preprocessing: transformers' MiniMaxM3VLVideoProcessor with do_resize=True (as vLLM calls it);
- placeholder expansion: MiniMaxM3VLProcessor with the real tokenizer and the video's metadata (fps, frame
  indices), which writes the "]<]x.y seconds[>[" timestamps into the text before tokenizing it;
- the tower, projector and merger: the model's, one call per segment of at most vision_segment_max_frames temporal
  patches (the released engines attend within each segment, temporal positions from 0; transformers 5.17 runs a
  longer video as one sequence), with the released 3D RoPE (make_vision_goldens' patch);
- generation with a video in the prompt: the model (videos of at most 4 temporal patches, where it segments as the
  released engines do).

Usage: python3 tools/goldens/make_video_goldens.py OUT_DIR  (writes OUT_DIR/vision/video_goldens.{safetensors,json})
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_vision_goldens as mv  # noqa: E402  (patches the rotary embedding and the weight init)
from make_vision_goldens import mg  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.models.minimax_m3_vl.image_processing_minimax_m3_vl import MiniMaxM3VLImageProcessor  # noqa
from transformers.models.minimax_m3_vl.processing_minimax_m3_vl import MiniMaxM3VLProcessor  # noqa: E402
from transformers.models.minimax_m3_vl.video_processing_minimax_m3_vl import MiniMaxM3VLVideoProcessor  # noqa

VDIR = "tests/fixtures/vision/videos"
# name -> (file, width, height, frames in the stream, fps, the frames vLLM's loader takes at 1 fps)
VIDEOS = {
    "clip": ("clip.mp4", 84, 56, 10, 4.0, [0, 4, 8, 9]),
    "tall": ("tall.webm", 50, 90, 11, 2.0, [0, 2, 4, 6, 8, 10]),
    "long": ("long.avi", 56, 56, 10, 1.0, list(range(10))),
}
TEXTS = ["Describe this video:]<]video[>[ What happens next?", "Look.\n]<]video[>[\nAnd?", "]<]video[>[Why?"]


def frames_of(name):
    file, w, h, total, _, idx = VIDEOS[name]
    raw = np.fromfile(os.path.join(VDIR, file.split(".")[0] + ".rgb"), dtype=np.uint8)
    assert raw.size == total * h * w * 3, name
    return raw.reshape(total, h, w, 3)[idx].copy()


@torch.no_grad()
def main():
    out_dir = sys.argv[1]
    cfg = mv.tiny_vl_config()
    model = mg.reference_model(cfg, 7)
    fixture = load_file("tests/fixtures/models/m3-tiny-vl/model.safetensors")
    params = dict(model.named_parameters())
    checked = 0
    for k, v in fixture.items():
        for cand in ("model." + k, "model." + k.replace(".mlp.fc", ".block_sparse_moe.fc"), k):
            if cand in params and tuple(params[cand].shape) == tuple(v.shape):
                assert torch.equal(params[cand].detach().cpu().to(v.dtype), v), k
                checked += 1
                break
    print(f"   m3-tiny-vl rebuilt: {checked} of {len(fixture)} fixture tensors found and equal", flush=True)

    vproc = MiniMaxM3VLVideoProcessor()
    smax = cfg["vision_config"]["vision_segment_max_frames"]
    out, meta = {}, {"videos": {}, "expansions": []}
    gen = torch.Generator().manual_seed(97)
    prompts = []
    for name, (file, w, h, total, fps, idx) in VIDEOS.items():
        frames = frames_of(name)
        feats = vproc(videos=[frames], do_resize=True, return_tensors="pt")
        pv, grid = feats["pixel_values_videos"].float(), feats["video_grid_thw"]
        t, gh, gw = (int(x) for x in grid[0])
        out[f"{name}.pixel_values"] = pv
        out[f"{name}.grid"] = grid[0].float()
        # The tower per segment of at most smax temporal patches, then the projector and merger.
        per_t = gh * gw
        towers = []
        for t0 in range(0, t, smax):
            st = min(smax, t - t0)
            seg = pv[t0 * per_t:(t0 + st) * per_t].to(mg.DEV)
            vt = model.model.vision_tower(pixel_values=seg, grid_thw=torch.tensor([[st, gh, gw]], device=mg.DEV))
            towers.append(vt.last_hidden_state.reshape(-1, vt.last_hidden_state.shape[-1]))
        tower = torch.cat(towers, 0)
        features = model.model.multi_modal_projector(tower)
        out[f"{name}.tower"] = tower.float().cpu()
        out[f"{name}.features"] = features.float().cpu()
        meta["videos"][name] = {"file": file, "size": [w, h], "frames": total, "fps": fps, "indices": idx,
                                "grid": [t, gh, gw], "tokens": int(features.shape[0])}
        print(f"   {name}: {len(idx)} frames {w}x{h} -> grid {[t, gh, gw]}, {features.shape[0]} tokens", flush=True)
        if t <= smax:
            ids = mg.rand_prompt(gen, 7, 500)
            for _ in range(t):
                ids += mg.rand_prompt(gen, 3, 500) + [mv.START_ID] + [mv.VIDEO_ID] * (gh * gw // 4) + [mv.END_ID]
            ids += mg.rand_prompt(gen, 5, 500)
            prompts.append((name, ids, pv, grid))

    # The processor's expansion with the real tokenizer, in context.
    tok = AutoTokenizer.from_pretrained("tests/fixtures/minimax-m3")
    proc = MiniMaxM3VLProcessor(image_processor=MiniMaxM3VLImageProcessor(), tokenizer=tok, video_processor=vproc)
    for name in ("clip", "tall"):
        file, w, h, total, fps, idx = VIDEOS[name]
        for text in TEXTS:
            enc = proc(text=[text], videos=[frames_of(name)], do_resize=True,
                       video_metadata=[{"fps": fps, "frames_indices": idx, "total_num_frames": total}])
            meta["expansions"].append({"video": name, "text": text, "input_ids": list(map(int, enc["input_ids"][0]))})
            print(f"   expansion of {name} in {text!r}: {len(enc['input_ids'][0])} ids", flush=True)

    results = []
    for name, ids, pv, grid in prompts:
        res = mv.run_greedy(model, ids, 8, pixel_values_videos=pv.to(mg.DEV), video_grid_thw=grid.to(mg.DEV))
        res["video"] = name
        results.append(res)
        print(f"   generate with {name}: {res['output_token_ids']} (min margin "
              f"{min(s['margin'] for s in res['steps']):.4f})", flush=True)

    os.makedirs(os.path.join(out_dir, "vision"), exist_ok=True)
    save_file(out, os.path.join(out_dir, "vision", "video_goldens.safetensors"), metadata={"format": "pt"})
    meta.update({"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                 "video_prompts": results})
    with open(os.path.join(out_dir, "vision", "video_goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
