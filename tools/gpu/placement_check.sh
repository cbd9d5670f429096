#!/usr/bin/env bash
# On a machine with 2+ GPUs (after check.sh or multi_gpu.sh unpacked build-gpu): `m3 generate --expert-placement`
# with a skewed routing histogram (m3-tiny-msa's experts 0-3 hot) at TP 2 + EP and at DEP 2, against the
# reference's greedy ids: the renumbered experts must route and answer as the checkpoint order does.
set -uo pipefail
cd "$(dirname "$0")/../.."
echo '{"expert_tokens": [900, 800, 700, 600, 5, 4, 3, 2]}' > /tmp/loads.json
python3 - > /tmp/in.jsonl <<'PY'
import json
g = json.load(open("tests/fixtures/goldens/m3-tiny-msa.json"))
for p in g["prompts"]:
    print(json.dumps({"prompt_token_ids": p["prompt_token_ids"], "max_tokens": p["max_tokens"], "temperature": 0, "ignore_eos": True}))
PY
for par in "--tensor-parallel-size 2 --enable-expert-parallel" "--data-parallel-size 2 --enable-expert-parallel"; do
  timeout 200 build-gpu/bin/m3 generate --model tests/fixtures/models/m3-tiny-msa --device cuda $par --expert-placement /tmp/loads.json \
    --input /tmp/in.jsonl --output /tmp/out.jsonl 2>/tmp/gen.log || { echo "FAILED $par"; tail -5 /tmp/gen.log; }
  grep -m1 "expert placement" /tmp/gen.log
  python3 - "$par" <<'PY'
import json, sys
g = json.load(open("tests/fixtures/goldens/m3-tiny-msa.json"))
outs = [json.loads(l) for l in open("/tmp/out.jsonl")]
ok = 0
for p, o in zip(g["prompts"], outs):
    ref, got = p["output_token_ids"], o.get("output_token_ids", [])
    clear = next((i for i, s in enumerate(p["steps"]) if s["margin"] < 0.5), len(ref))
    ok += got[:clear] == ref[:clear]
print(f"m3 generate --device cuda {sys.argv[1]} --expert-placement (skewed): {ok}/{len(outs)} match the reference greedy ids")
PY
done
