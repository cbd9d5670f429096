#!/usr/bin/env python3
"""Where a cached turn's TTFT goes (issue #15), against a running `m3 serve` on port argv[1]; requests with
max_tokens 1, so latency = TTFT. Default mode: a fresh 1,024-token prompt; a 32,768-token conversation sent
cold; the same conversation + 1,024 new tokens (the cached turn). Sent three ways: completions with token ids
(no tokenization on the server), completions with text (/detokenize of the same ids), and chat (system =
the conversation, then a user turn; the server renders the template and tokenizes). `evict` mode: after the
conversation, 2 x 16K tokens of other prompts push it out of a small device pool before its next turn.
Prints medians in ms."""
import json
import random
import statistics
import sys
import time
import urllib.request

PORT, MODE = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "ways")
rng = random.Random(int(time.time()))  # new conversations every run: nothing cached from an earlier one


def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    t0 = time.perf_counter()
    out = json.load(urllib.request.urlopen(req))
    return out, (time.perf_counter() - t0) * 1e3


def ids(n):
    return [rng.randrange(1000, 150000) for _ in range(n)]


def text(token_ids):
    return post("/detokenize", {"model": "minimax-m3", "tokens": token_ids})[0]["prompt"]


def complete(prompt):
    out, ms = post("/v1/completions", {"model": "minimax-m3", "prompt": prompt, "max_tokens": 1,
                                       "temperature": 0, "ignore_eos": True})
    return ms, out["usage"]


def chat(messages):
    out, ms = post("/v1/chat/completions", {"model": "minimax-m3", "messages": messages, "max_tokens": 1,
                                            "temperature": 0, "ignore_eos": True})
    return ms, out["usage"]


def report(kind, fresh, cold, turn, usage):
    f, t = statistics.median(fresh), statistics.median(turn)
    print(f"{kind:5}: fresh 1K {f:6.1f} ms | cold 32K {statistics.median(cold):7.1f} ms | 1K turn on 32K "
          f"{t:6.1f} ms ({usage['prompt_tokens_details']['cached_tokens']} of {usage['prompt_tokens']} cached) | "
          f"turn / fresh {t / f:.2f}")


if MODE == "ways":
    for kind in ("ids", "text", "chat"):
        fresh, cold, turn = [], [], []
        for _ in range(4):
            base, more, new = ids(32768), ids(1024), ids(1024)
            if kind == "ids":
                fresh.append(complete(new)[0])
                cold.append(complete(base)[0])
                ms, usage = complete(base + more)
            elif kind == "text":
                fresh.append(complete(text(new))[0])
                cold.append(complete(text(base))[0])
                ms, usage = complete(text(base) + text(more))
            else:
                system = {"role": "system", "content": text(base)}
                fresh.append(chat([{"role": "user", "content": text(new)}])[0])
                cold.append(chat([system, {"role": "user", "content": "hello"}])[0])
                ms, usage = chat([system, {"role": "user", "content": "hello"},
                                  {"role": "assistant", "content": "hi"}, {"role": "user", "content": text(more)}])
            turn.append(ms)
        report(kind, fresh, cold, turn, usage)
else:
    fresh, cold, turn = [], [], []
    for _ in range(3):
        base = ids(32768)
        fresh.append(complete(ids(1024))[0])
        cold.append(complete(base)[0])
        for _ in range(2):
            complete(ids(16384))  # other traffic
        ms, usage = complete(base + ids(1024))
        turn.append(ms)
    report("evict", fresh, cold, turn, usage)
