// OpenAI endpoints on the tiny random model through the official `openai` client and raw HTTP: chat and
// completions (streaming and not), vllm-bench style token-id prompts, n > 1, seeds, logprobs, stop strings,
// /v1/models, /tokenize + /detokenize, prefix caching (usage.prompt_tokens_details.cached_tokens, cache_salt,
// POST /reset_prefix_cache, the vllm:prefix_cache_* counters) and the seed documents' curl examples run as
// written.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { MODEL_NAME, haveCurl, parseMetrics, parseSSE, postJSON, sh, startServer } from './lib/harness.mjs';

const MAX_LEN = 2048;
let server, client;

before(async () => {
  // The seed documents call the model MiniMaxAI/MiniMax-M3, so it is served under that alias too.
  server = await startServer({ args: ['--max-model-len', String(MAX_LEN), '--served-model-name',
                                      MODEL_NAME, 'MiniMaxAI/MiniMax-M3'] });
  client = server.openai();
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

async function rawStream(route, body) {
  const r = await fetch(`${server.url}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_NAME, ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = parseSSE(await r.text());
  for (const e of events) assert.equal(e.event, null, 'OpenAI streams carry no event: lines');
  assert.equal(events.at(-1).data, '[DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e.data));
}

describe('models, tokenizer endpoints', () => {
  it('/v1/models lists the served names with root and max_model_len', async () => {
    const models = [];
    for await (const m of client.models.list()) models.push(m);
    assert.equal(models[0].id, MODEL_NAME);
    assert.deepEqual(models.map((m) => m.id), [MODEL_NAME, 'MiniMaxAI/MiniMax-M3']);
    for (const m of models) {
      assert.equal(m.object, 'model');
      assert.equal(m.root, server.model);
      assert.equal(m.max_model_len, MAX_LEN);
    }
  });

  it('/tokenize and /detokenize round-trip text', async () => {
    const text = 'Hello, world! 你好 — and more text';
    const t = await postJSON(server, '/tokenize', { model: MODEL_NAME, prompt: text, return_token_strs: true });
    assert.equal(t.status, 200, t.text);
    assert.ok(Array.isArray(t.json.tokens) && t.json.tokens.length > 5);
    assert.equal(t.json.count, t.json.tokens.length);
    assert.equal(t.json.max_model_len, MAX_LEN);
    assert.equal(t.json.token_strs.length, t.json.tokens.length);
    const d = await postJSON(server, '/detokenize', { model: MODEL_NAME, tokens: t.json.tokens });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.prompt, text);
  });

  it('/tokenize with messages renders the chat template', async () => {
    const t = await postJSON(server, '/tokenize', {
      messages: [{ role: 'user', content: 'What is 2+2?' }],
      chat_template_kwargs: { thinking_mode: 'enabled' },
    });
    assert.equal(t.status, 200, t.text);
    assert.match(t.json.prompt, /\]~b\]user\nWhat is 2\+2\?\[e~\[\n\]~b\]ai\n<mm:think>$/);
    assert.equal(t.json.tokens.at(-1), 200059);
    assert.equal(t.json.count, t.json.tokens.length);
  });
});

describe('chat completions', () => {
  it('non-streaming: shape, usage and length finish', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 12, ignore_eos: true,
    });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL_NAME);
    assert.equal(typeof r.created, 'number');
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    assert.ok(r.usage.prompt_tokens > 10);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  });

  it('streaming: role chunk first, deltas, finish chunk, usage chunk, [DONE]', async () => {
    const chunks = await rawStream('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Count.' }], max_tokens: 10, ignore_eos: true,
      stream_options: { include_usage: true },
    });
    const first = chunks[0];
    assert.equal(first.object, 'chat.completion.chunk');
    assert.deepEqual(first.choices[0].delta, { role: 'assistant', content: '' });
    assert.equal(first.choices[0].finish_reason, null);
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    const finish = withChoices.filter((c) => c.choices[0].finish_reason !== null);
    assert.equal(finish.length, 1);
    assert.equal(finish[0].choices[0].finish_reason, 'length');
    assert.equal(withChoices.at(-1), finish[0], 'the finish chunk is the last chunk with choices');
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 10);
    assert.equal(usage.usage.total_tokens, usage.usage.prompt_tokens + 10);
    for (const c of chunks.slice(0, -1)) assert.equal(c.usage, null, 'earlier chunks carry usage: null');
    for (const c of chunks) assert.equal(c.id, first.id);
    const text = withChoices.map((c) => c.choices[0].delta.content ?? '').join('');
    assert.ok(text.length > 0);
  });

  it('streaming through the client equals the greedy non-streaming answer', async () => {
    const req = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Greedy please.' }], max_tokens: 24,
                  temperature: 0 };
    const full = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true,
                                                          stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null, role = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        role ??= c.delta.role;
        text += c.delta.content ?? '';
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, full.choices[0].message.content);
    assert.equal(finish, full.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, full.usage.completion_tokens);
  });

  it('n > 1 returns n indexed choices, streamed interleaved', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Three ways.' }], n: 3, max_tokens: 8, ignore_eos: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    assert.equal(r.usage.completion_tokens, 24);
    const chunks = await rawStream('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Two ways.' }], n: 2, max_tokens: 6, ignore_eos: true,
    });
    for (const i of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0]?.index === i);
      assert.equal(mine[0].choices[0].delta.role, 'assistant');
      assert.equal(mine.filter((c) => c.choices[0].finish_reason === 'length').length, 1);
    }
  });

  it('a seed makes sampling reproducible', async () => {
    const req = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Random words.' }], max_tokens: 16,
                  temperature: 1, ignore_eos: true };
    const a = await client.chat.completions.create({ ...req, seed: 1234 });
    const b = await client.chat.completions.create({ ...req, seed: 1234 });
    const c = await client.chat.completions.create({ ...req, seed: 4321 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
  });

  it('logprobs and top_logprobs have the OpenAI shape', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Logprobs.' }], max_tokens: 5, ignore_eos: true,
      logprobs: true, top_logprobs: 3,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.ok(Array.isArray(e.bytes));
      assert.equal(e.top_logprobs.length, 3);
      for (let k = 1; k < 3; ++k) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
      for (const t of e.top_logprobs) assert.ok(typeof t.token === 'string' && Array.isArray(t.bytes));
    }
    const none = await client.chat.completions.create({
      model: MODEL_NAME, messages: [{ role: 'user', content: 'No logprobs.' }], max_tokens: 2,
    });
    assert.equal(none.choices[0].logprobs, null);
  });

  it('a stop string ends the greedy text right before it', async () => {
    const req = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Stop test.' }], max_tokens: 40,
                  temperature: 0, ignore_eos: true };
    const full = (await client.chat.completions.create(req)).choices[0].message.content;
    const chars = [...full];
    assert.ok(chars.length > 20, full);
    const stop = chars.slice(10, 14).join('');
    const r = await client.chat.completions.create({ ...req, stop: [stop, 'zz-never-zz'] });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].stop_reason, stop);
    assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  });
});

describe('completions', () => {
  it('text prompt, non-streaming', async () => {
    const r = await client.completions.create({ model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 7,
                                                ignore_eos: true });
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices[0].index, 0);
    assert.equal(typeof r.choices[0].text, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 7);
    const t = await postJSON(server, '/tokenize', { prompt: 'Once upon a time' });
    assert.equal(r.usage.prompt_tokens, t.json.count, 'no BOS is added to a completions prompt');
  });

  it('token-id prompt as vllm bench sends it: ignore_eos, streaming, usage', async () => {
    const ids = Array.from({ length: 100 }, (_, i) => 1000 + i * 37);
    const chunks = await rawStream('/v1/completions', {
      prompt: ids, max_tokens: 32, ignore_eos: true, repetition_penalty: 1.0, logprobs: null, temperature: 0,
      stream_options: { include_usage: true },
    });
    const usage = chunks.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.prompt_tokens, 100);
    assert.equal(usage.usage.completion_tokens, 32);
    const texts = chunks.slice(0, -1);
    for (const c of texts) {
      assert.equal(c.object, 'text_completion');
      assert.equal(c.choices[0].index, 0);
      assert.equal(typeof c.choices[0].text, 'string');
    }
    assert.equal(texts.at(-1).choices[0].finish_reason, 'length');
    assert.equal(texts.filter((c) => c.choices[0].finish_reason !== null).length, 1);
    // One chunk per generated token (the last may be the finish marker only).
    assert.ok(texts.length >= 31 && texts.length <= 33, `chunks: ${texts.length}`);
    // The same request through the client.
    const stream = await client.completions.create({ model: MODEL_NAME, prompt: ids, max_tokens: 32,
                                                     ignore_eos: true, stream: true, temperature: 0,
                                                     stream_options: { include_usage: true } });
    let text = '', tokens = 0;
    for await (const c of stream) {
      if (c.usage) tokens = c.usage.completion_tokens;
      text += c.choices[0]?.text ?? '';
    }
    assert.equal(tokens, 32);
    assert.equal(text, texts.map((c) => c.choices[0].text).join(''));
  });

  it('a batch of prompts gets one choice per prompt', async () => {
    const r = await client.completions.create({ model: MODEL_NAME, prompt: [[11, 12, 13], 'text prompt'],
                                                max_tokens: 3, ignore_eos: true });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    assert.equal(r.usage.completion_tokens, 6);
  });

  it('logprobs as an integer returns tokens, token_logprobs, top_logprobs, text_offset', async () => {
    const r = await client.completions.create({ model: MODEL_NAME, prompt: 'Hello', max_tokens: 4,
                                                ignore_eos: true, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.top_logprobs.length, 4);
    assert.equal(lp.text_offset.length, 4);
    for (const t of lp.top_logprobs) assert.ok(Object.keys(t).length >= 1 && Object.keys(t).length <= 2);
    for (let i = 1; i < 4; ++i) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
  });
});

describe('seed document examples', () => {
  it('the health check and curl requests of the deployment guides work as written', async (t) => {
    if (!(await haveCurl())) {
      t.skip('curl is not installed');
      return;
    }
    const base = `http://localhost:${server.port}`;
    // 000 (TensorRT-LLM guide): health check.
    const health = await sh(`curl -s -o /dev/null -w "Status: %{http_code}\\n" "${base}/health"`);
    assert.equal(health, 'Status: 200\n');
    // 000: basic chat test.
    const chat = JSON.parse(await sh(`curl ${base}/v1/chat/completions \\
  -H "Content-Type: application/json" \\
  -d '{
      "model": "MiniMaxAI/MiniMax-M3",
      "messages": [
          {"role": "user", "content": "What is the capital of France?"}
      ],
      "max_tokens": 256,
      "temperature": 0
  }'`));
    assert.equal(chat.object, 'chat.completion');
    assert.equal(chat.choices[0].message.role, 'assistant');
    assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
    assert.ok(chat.usage.completion_tokens <= 256);
    // 003 (vLLM recipe): chat with a system prompt and sampling parameters, no max_tokens.
    const chat2 = JSON.parse(await sh(`curl ${base}/v1/chat/completions \\
-H "Content-Type: application/json" \\
-d '{
"model": "MiniMaxAI/MiniMax-M3",
"temperature": 1.0,
"top_p": 0.95,
"messages": [
{"role": "system", "content": "You are a helpful assistant. Your name is MiniMax-M3 and is built by MiniMax."},
{"role": "user", "content": "Explain MSA sparse attention in 3 bullets."}
]
}'`, 120000));
    assert.equal(chat2.object, 'chat.completion');
    assert.ok(chat2.usage.prompt_tokens + chat2.usage.completion_tokens <= MAX_LEN);
    // 004 (Lambda): model listing.
    const models = JSON.parse(await sh(`curl -X GET ${base}/v1/models \\
  -H "Content-Type: application/json"`));
    assert.ok(models.data.some((m) => m.id === 'minimax-m3'));
  });

  it('the vLLM recipe Python example works through the JS client (thinking_mode via extra body)', async () => {
    const c = server.openai({ apiKey: 'EMPTY', baseURL: `http://localhost:${server.port}/v1` });
    const r = await c.chat.completions.create({
      model: 'MiniMaxAI/MiniMax-M3',
      messages: [{ role: 'user', content: 'Prove there are infinitely many primes.' }],
      chat_template_kwargs: { thinking_mode: 'enabled' },
      max_tokens: 16,
    });
    const msg = r.choices[0].message;
    assert.ok('reasoning' in msg || 'reasoning_content' in msg);
    assert.equal(r.model, MODEL_NAME);
  });
});

describe('prefix caching (on by default, as in vLLM)', () => {
  // A prompt no other test sends: 600 token ids, then the same prompt again.
  const prompt = Array.from({ length: 600 }, (_, i) => 3 + ((i * 37) % 150));
  const complete = (extra = {}) =>
    postJSON(server, '/v1/completions', { model: MODEL_NAME, prompt, max_tokens: 4, temperature: 0, ...extra });

  it('a repeated prompt reads its whole pages from the cache and answers the same', async () => {
    const first = await complete();
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.usage.prompt_tokens_details.cached_tokens, 0);
    const again = await complete();
    assert.equal(again.status, 200, again.text);
    const cached = again.json.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached > 0 && cached < prompt.length, `cached_tokens ${cached}`);
    assert.equal(again.json.choices[0].text, first.json.choices[0].text);
    // The official client sees the same field on chat completions.
    const messages = [{ role: 'user', content: 'cache me '.repeat(200) }];
    await client.chat.completions.create({ model: MODEL_NAME, messages, max_tokens: 2, temperature: 0 });
    const chat = await client.chat.completions.create({ model: MODEL_NAME, messages, max_tokens: 2, temperature: 0 });
    assert.ok(chat.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(chat.usage));
  });

  it('cache_salt separates tenants; a malformed one is a 400', async () => {
    const a = await complete({ cache_salt: 'tenant-a' });
    assert.equal(a.json.usage.prompt_tokens_details.cached_tokens, 0);
    const b = await complete({ cache_salt: 'tenant-a' });
    assert.ok(b.json.usage.prompt_tokens_details.cached_tokens > 0);
    const bad = await complete({ cache_salt: 7 });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.text, /cache_salt/);
  });

  it('POST /reset_prefix_cache empties it; /metrics counts queries and hits', async () => {
    const r = await fetch(`${server.url}/reset_prefix_cache`, { method: 'POST' });
    assert.equal(r.status, 200);
    const after = await complete();
    assert.equal(after.json.usage.prompt_tokens_details.cached_tokens, 0);
    const m = parseMetrics(await (await fetch(`${server.url}/metrics`)).text());
    assert.ok(m['vllm:prefix_cache_hits_total'] > 0, m._text);
    assert.ok(m['vllm:prefix_cache_queries_total'] >= m['vllm:prefix_cache_hits_total'] + 3 * prompt.length);
  });
});
