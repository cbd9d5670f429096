#!/usr/bin/env bash
# Issue #17's host path of a long prompt: a chat request of about 1M tokens (4 MB of mixed text, a new text per
# request so no cache helps) POSTed to /tokenize, which runs what a generation request runs before its first
# prefill chunk (body parse, template render, tokenization) and answers with the ids. `m3 serve --device cuda` on
# the tiny model (the host path does not depend on the model; --device cpu would add the CPU backend's OpenMP
# threads, which compete with the tokenizer's), with the tokenizer on all cores and on one
# (M3_TOKENIZER_THREADS=1). Run on the GPU machine after pack.sh: bash tools/gpu/long_prompt_host.sh
source "$(dirname "$0")/env.sh"
MODEL=/tmp/m3-tiny-host
$M3 make-random-model --preset tiny --out $MODEL --tokenizer-from tests/fixtures/minimax-m3 >/dev/null 2>&1
for threads in "" 1; do
  M3_TOKENIZER_THREADS=$threads $M3 serve $MODEL --device cuda --port 8160 --served-model-name m \
    --max-model-len 1048576 >"$OUT/host_serve_${threads:-all}.log" 2>&1 &
  server=$!
  if up 8160 $server; then
    echo "== tokenizer threads: ${threads:-all ($(nproc) cores)}"
    python3 - <<'PY'
import json, random, time, http.client
words = ["the", "model", "serves", "tokens", "quickly", "函数", "数据", "😀", "def", "return", "x", "=", "1234",
         "\n", "  ", "résumé", "naïve", "{", "}", "(", ")", "Привет", "мир", "if", "else", "int", "value", ",", "."]
for seed in range(4):
    rng = random.Random(seed)
    out, n = [], 0
    while n < 4_000_000:
        w = rng.choice(words) + (" " if rng.random() < 0.7 else "")
        out.append(w); n += len(w.encode())
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "".join(out)}]})
    c = http.client.HTTPConnection("127.0.0.1", 8160, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/tokenize", body, {"Content-Type": "application/json"})
    r = c.getresponse(); data = r.read(); t = time.perf_counter() - t0
    count = json.loads(data)["count"] if r.status == 200 else data[:200]
    print(f"  {len(body) / 1e6:.2f} MB body -> {count} tokens: {t * 1000:.0f} ms (request to answer)", flush=True)
PY
  else
    echo "the server did not come up"; tail -5 "$OUT/host_serve_${threads:-all}.log"
  fi
  kill -TERM $server 2>/dev/null; wait $server
done
