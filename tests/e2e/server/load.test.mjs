// Concurrency and overload: 256 concurrent streams all complete with exact token counts; 1024 clients at once
// (streaming and not, some dropping mid-stream) lose nothing and leave the KV pool empty; clients that go away
// mid-stream or while still queued are aborted and their KV pages freed (landscape.md §4.3, §4.9 rows 43-44);
// a full queue answers 429 with Retry-After before any 200 is committed (row 45), on both APIs.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { MODEL_NAME, expectAnthropicError, expectOpenAIError, parseSSE, postJSON, startServer, waitFor }
  from './lib/harness.mjs';

const chatBody = (content, extra = {}) => ({
  model: MODEL_NAME, messages: [{ role: 'user', content }], stream: true, ignore_eos: true, ...extra,
});

// Starts a streaming request and resolves once its first SSE chunk has arrived; abort() drops the connection.
async function openStream(server, body) {
  const ctl = new AbortController();
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: ctl.signal,
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const { value } = await reader.read();
  assert.ok(value && value.length > 0);
  return { abort: () => ctl.abort(), reader };
}

const gauge = (m, name) => m[name];
const aborted = (m) => m['m3:requests_aborted_total{model_name="minimax-m3",reason="client_disconnect"}'] ?? 0;

async function waitIdle(server, what, timeoutMs = 20000) {
  return waitFor(async () => {
    const m = await server.metrics();
    const [running, waiting, kv] = ['vllm:num_requests_running', 'vllm:num_requests_waiting',
                                    'vllm:kv_cache_usage_perc'].map((k) => gauge(m, k));
    if (running === 0 && waiting === 0 && kv === 0) return m;
    throw new Error(`running=${running} waiting=${waiting} kv_cache_usage_perc=${kv}`);
  }, { timeoutMs, what });
}

describe('concurrency', () => {
  it('256 concurrent streaming chats all finish with [DONE] and 16 tokens each', async () => {
    const server = await startServer({ args: ['--max-num-seqs', '256', '--max-queued-requests', '1024',
                                              '--max-model-len', '1024'] });
    try {
      const started = Date.now();
      const results = await Promise.all(Array.from({ length: 256 }, async (_, i) => {
        const r = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify(chatBody(`request ${i}`, { max_tokens: 16, stream_options: { include_usage: true } })),
        });
        assert.equal(r.status, 200);
        const events = parseSSE(await r.text());
        assert.equal(events.at(-1).data, '[DONE]', `request ${i} got [DONE]`);
        const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data));
        const usage = chunks.at(-1).usage;
        const finish = chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
        return { usage, finish, id: chunks[0].id };
      }));
      assert.ok(Date.now() - started < 300000);
      for (const r of results) {
        assert.equal(r.usage.completion_tokens, 16);
        assert.deepEqual(r.finish, ['length']);
      }
      assert.equal(new Set(results.map((r) => r.id)).size, 256, 'every response has its own id');
      const m = await waitIdle(server, 'the engine to go idle after 256 requests');
      assert.ok(m['vllm:request_success_total{model_name="minimax-m3",finished_reason="length"}'] >= 256);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, server.output);
    }
  });
});

describe('1024 clients at once', () => {
  // The CPU backend's share of the soak (#17): 1024 clients arrive together, 256 run and the rest queue; a mix of
  // streaming and non-streaming chats of random lengths, every tenth stream dropped after its first chunk. Every
  // kept request must finish whole, every dropped one must be counted as a client abort, and the KV pool must
  // be empty afterwards.
  it('none is lost, the dropped ones are aborted, and the KV pool returns to empty', async () => {
    const server = await startServer({ args: ['--max-num-seqs', '256', '--max-queued-requests', '1024',
                                              '--max-model-len', '1024', '--num-kv-pages', '1024'] });
    try {
      let seed = 12345;
      const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
      // A dropped stream asks for 800 tokens, so that it is still running when its client goes.
      const plan = Array.from({ length: 1024 }, (_, i) => ({
        i, stream: i % 2 === 0, drop: i % 20 === 0, tokens: i % 20 === 0 ? 800 : 1 + rand(12), words: 1 + rand(40),
      }));
      const results = await Promise.all(plan.map(async (p) => {
        const body = chatBody(`client ${p.i}: ${'word '.repeat(p.words)}`, { max_tokens: p.tokens, stream: p.stream,
          ...(p.stream ? { stream_options: { include_usage: true } } : {}) });
        if (p.drop) {
          const s = await openStream(server, body);
          s.abort();
          return { p };
        }
        const r = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
        assert.equal(r.status, 200, `client ${p.i}`);
        if (!p.stream) return { p, usage: (await r.json()).usage };
        const events = parseSSE(await r.text());
        assert.equal(events.at(-1).data, '[DONE]', `client ${p.i} got [DONE]`);
        return { p, usage: JSON.parse(events.at(-2).data).usage };
      }));
      for (const { p, usage } of results)
        if (!p.drop) assert.equal(usage.completion_tokens, p.tokens, `client ${p.i}`);
      const dropped = plan.filter((p) => p.drop).length;
      const m = await waitIdle(server, 'the engine to go idle after 1024 clients', 60000);
      assert.equal(aborted(m), dropped, 'every dropped stream is one client abort');
      assert.equal(m['vllm:request_success_total{model_name="minimax-m3",finished_reason="length"}'],
                   1024 - dropped);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, server.output);
    }
  });
});

describe('client disconnects', () => {
  it('streams dropped after one chunk or while queued are aborted and free their KV pages', async () => {
    const server = await startServer({ args: ['--max-num-seqs', '8', '--max-queued-requests', '512',
                                              '--max-model-len', '4096'] });
    try {
      // 50 streams: each is dropped as soon as its first chunk arrives (8 run at a time, the rest queue).
      await Promise.all(Array.from({ length: 50 }, async (_, i) => {
        const s = await openStream(server, chatBody(`drop me ${i}`, { max_tokens: 3000 }));
        s.abort();
      }));
      let m = await waitIdle(server, 'running / waiting / KV usage to return to 0 after 50 mid-stream drops');
      assert.ok(aborted(m) >= 50, `aborted: ${aborted(m)}`);

      // 8 holders keep the batch full; 20 more wait in the queue and are dropped before their first token.
      const holders = await Promise.all(Array.from({ length: 8 }, (_, i) =>
        openStream(server, chatBody(`hold ${i}`, { max_tokens: 3500 }))));
      const queued = Array.from({ length: 20 }, (_, i) => {
        const ctl = new AbortController();
        const p = fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
          body: JSON.stringify(chatBody(`queued ${i} ${'long prompt '.repeat(200)}`, { max_tokens: 3000 })),
        }).catch((e) => e);
        return { ctl, p };
      });
      await waitFor(async () => gauge(await server.metrics(), 'vllm:num_requests_waiting') === 20,
                    { what: '20 requests to be queued behind the holders' });
      const before = aborted(await server.metrics());
      for (const q of queued) q.ctl.abort();
      await Promise.all(queued.map((q) => q.p));
      m = await waitFor(async () => {
        const x = await server.metrics();
        return gauge(x, 'vllm:num_requests_waiting') === 0 && x;
      }, { timeoutMs: 3000, what: 'queued requests whose clients left to be dropped while the batch is still busy' });
      assert.equal(gauge(m, 'vllm:num_requests_running'), 8, 'the holders are still running');
      assert.ok(aborted(m) >= before + 20);
      for (const h of holders) h.abort();
      m = await waitIdle(server, 'running / waiting / KV usage to return to 0 after dropping the holders');
      assert.ok(aborted(m) >= 78, `aborted: ${aborted(m)}`);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, server.output);
    }
  });
});

describe('overload', () => {
  it('a full queue answers 429 with Retry-After before any 200, on every generation route', async () => {
    const server = await startServer({ args: ['--max-queued-requests', '2', '--max-model-len', '4096'] });
    try {
      const holders = await Promise.all([0, 1].map((i) => openStream(server, chatBody(`hold ${i}`,
                                                                                      { max_tokens: 3500 }))));
      const msgs = [{ role: 'user', content: 'hi' }];
      for (const stream of [false, true]) {
        const r = await postJSON(server, '/v1/chat/completions', { model: MODEL_NAME, messages: msgs, max_tokens: 4,
                                                                   stream });
        expectOpenAIError(assert, r, 429);
        assert.equal(r.json.error.type, 'rate_limit_error');
        assert.ok(Number(r.headers.get('retry-after')) >= 0, 'Retry-After is set');
        assert.match(r.headers.get('content-type'), /application\/json/, 'no 200 stream was committed');
      }
      const c = await postJSON(server, '/v1/completions', { prompt: 'x', max_tokens: 4, stream: true });
      expectOpenAIError(assert, c, 429);
      assert.ok(c.headers.get('retry-after'));
      const a = await postJSON(server, '/v1/messages', { model: MODEL_NAME, max_tokens: 4, messages: msgs });
      assert.ok(a.status === 429 || a.status === 529, `Anthropic overload status ${a.status}`);
      expectAnthropicError(assert, a, a.status);
      assert.ok(a.headers.get('retry-after'));
      await assert.rejects(server.openai().chat.completions.create({ model: MODEL_NAME, messages: msgs, max_tokens: 2 }),
                           (e) => e.status === 429);
      // Health stays 200: overload is not unreadiness.
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
      for (const h of holders) h.abort();
      await waitFor(async () => (await postJSON(server, '/v1/completions', { prompt: 'x', max_tokens: 2 })).status === 200,
                    { what: 'requests to be admitted again once the holders left' });
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, server.output);
    }
  });
});
