#!/usr/bin/env bash
# Issue #18's GPU figures, in one run(...) call after pack.sh: (1) the CUDA vision tower's encoder throughput at
# the released widths (m3-kernel-bench --filter vision: 224, 448 and 672 px); (2) TTFT of a chat request with
# one image on a real-width model (random weights, the vision tower and 1 dense text layer: the text side's
# share of the TTFT is small), a new image each time and the same image again (the encoder cache); (3) the
# e2e vision suite on --device cuda (needs pack.sh's M3_PACK_NODE=1). Results to $OUT.
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1
echo "== (1) encoder throughput"
timeout 240 build-gpu/bin/m3-kernel-bench --filter vision --iters 20 2>&1 | grep -E "vision_encode|error" | head
echo "== (2) TTFT with one image"
MODEL=/tmp/m3-vl
$M3 make-random-model --preset m3 --layers 1+0 --out $MODEL --tokenizer-from tests/fixtures/minimax-m3 >/dev/null 2>&1
$M3 serve $MODEL --device cuda --port 8150 --served-model-name m --max-model-len 8192 >"$OUT/vision_serve.log" 2>&1 &
server=$!
if up 8150 $server; then
  grep -E "vision tower|memory plan" "$OUT/vision_serve.log" | head -3
  python3 - <<'PY'
import base64, io, json, time, http.client
import numpy as np
from PIL import Image
def png(seed, side):
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()
def ttft(img):
    body = json.dumps({"model": "m", "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + img}},
        {"type": "text", "text": "Describe the image."}]}]})
    c = http.client.HTTPConnection("127.0.0.1", 8150, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    while True:
        line = r.readline()
        if b'"content"' in line or b'"reasoning_content"' in line or not line:
            break
    t = time.perf_counter() - t0
    r.read()
    return t * 1000
for side in (224, 448, 672):
    imgs = [png(s, side) for s in range(6)]
    ttft(imgs[0])  # warm-up
    new = sorted(ttft(i) for i in imgs[1:])
    again = sorted(ttft(imgs[1]) for _ in range(5))
    print(f"{side}x{side}: TTFT new image median {new[2]:.1f} ms (min {new[0]:.1f}), same image again median {again[2]:.1f} ms")
PY
else
  echo "the server did not come up"; tail -20 "$OUT/vision_serve.log"
fi
kill -TERM $server 2>/dev/null; wait $server
echo "== (3) e2e vision suite on --device cuda"
if [ -f build-gpu/node/node.xz ]; then E2E_SUITES=vision timeout 200 bash tools/gpu/check.sh e2e; else echo "skipped: no node in the bundle"; fi
