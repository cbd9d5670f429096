#!/usr/bin/env bash
# Runs on a multi-GPU machine: the synthetic tiny model served at TP 1, 2 and 4 answers one greedy chat with
# top-3 logprobs; where a TP-N answer differs from TP 1, prints both top-3 lists at the first differing token (a
# margin of a few 1e-3 is a bf16 near-tie that the ranks' reduction order flips, not a bug).
source "$(dirname "$0")/env.sh"
build-gpu/bin/m3 make-random-model --preset tiny --out /tmp/m3-tiny --tokenizer-from tests/fixtures/minimax-m3 2>/dev/null
ask() { curl -s "localhost:$1/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"m","messages":[{"role":"user","content":"Write a haiku about GPUs"}],"max_tokens":48,"temperature":0,"ignore_eos":true,"logprobs":true,"top_logprobs":3}' > /tmp/ans_$1.json; }
for t in 1 2 4; do
  build-gpu/bin/m3 serve /tmp/m3-tiny --device cuda --tensor-parallel-size $t --port 830$t --served-model-name m > /tmp/s$t.log 2>&1 &
  S=$!; up 830$t && ask 830$t; kill $S; wait $S
done
python3 - <<'PY'
import json
a = [json.load(open(f"/tmp/ans_830{t}.json"))["choices"][0]["logprobs"]["content"] for t in (1, 2, 4)]
for t, other in ((2, a[1]), (4, a[2])):
    for i, (x, y) in enumerate(zip(a[0], other)):
        if x["token"] != y["token"]:
            print(f"TP {t}: first difference at token {i}: TP1 top {[(c['token'], round(c['logprob'], 4)) for c in x['top_logprobs']]}; TP{t} top {[(c['token'], round(c['logprob'], 4)) for c in y['top_logprobs']]}")
            break
    else:
        print(f"TP {t}: all {len(a[0])} tokens equal")
PY
