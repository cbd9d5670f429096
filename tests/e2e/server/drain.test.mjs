// Graceful shutdown (landscape.md §4.4, §4.9 row 46): on SIGTERM /health turns 503, new requests get 503 with
// Retry-After (or the connection is refused once the listener closed), in-flight requests finish normally, and
// the process exits 0 within --shutdown-timeout; requests still running at the deadline end with "abort".
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { MODEL_NAME, parseSSE, startServer, waitFor } from './lib/harness.mjs';

// `p`, or null after `ms` (the timer does not keep the test process alive).
function within(p, ms) {
  let timer;
  const t = new Promise((r) => { timer = setTimeout(() => r(null), ms); });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

const body = (content, max_tokens, stream) => JSON.stringify({
  model: MODEL_NAME, messages: [{ role: 'user', content }], max_tokens, ignore_eos: true, stream,
  ...(stream ? { stream_options: { include_usage: true } } : {}),
});

// A streaming request that has produced its first chunk; `done` resolves to the parsed rest of the stream.
async function inFlight(server, content, maxTokens) {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body(content, maxTokens, true),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value, { stream: true });
  const done = (async () => {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      text += decoder.decode(value, { stream: true });
    }
    const events = parseSSE(text);
    assert.equal(events.at(-1).data, '[DONE]');
    return events.slice(0, -1).map((e) => JSON.parse(e.data));
  })();
  return { done };
}

// A request sent while draining: 503 with Retry-After, or a refused connection once the server closed.
async function refused(server) {
  try {
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body('late', 4, false),
    });
    const json = await r.json();
    assert.equal(r.status, 503, JSON.stringify(json));
    assert.ok(r.headers.get('retry-after'), 'Retry-After on a draining 503');
    assert.equal(typeof json.error?.message, 'string');
    return 'http-503';
  } catch (e) {
    if (e.code === 'ERR_ASSERTION') throw e;
    assert.match(String(e.cause?.code ?? e.message), /ECONNREFUSED|ECONNRESET|UND_ERR_SOCKET|other side closed/);
    return 'refused';
  }
}

describe('drain on SIGTERM', () => {
  it('in-flight requests complete, readiness and new requests get 503, exit 0', async () => {
    const server = await startServer({ args: ['--shutdown-timeout', '60', '--max-model-len', '4096'] });
    const streams = await Promise.all([0, 1, 2].map((i) => inFlight(server, `long ${i}`, 800)));
    const plain = fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: body('plain', 600, false),
    }).then(async (r) => ({ status: r.status, json: await r.json() }));
    await waitFor(async () => (await server.metrics())['vllm:num_requests_running'] === 4,
                  { what: 'all four requests to be running' });
    const t0 = Date.now();
    server.proc.kill('SIGTERM');

    const health = await waitFor(async () => {
      const r = await fetch(`${server.url}/health`);
      return r.status === 503 && r;
    }, { timeoutMs: 5000, what: '/health to turn 503 after SIGTERM' });
    assert.equal(typeof (await health.json()).error.message, 'string');
    const stillRunning = (await server.metrics())['vllm:num_requests_running'];
    assert.ok(stillRunning > 0, 'the check above ran while requests were still in flight');
    assert.equal(await refused(server), 'http-503', 'while requests are in flight the listener still answers');

    for (const s of streams) {
      const chunks = await s.done;
      const finish = chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
      assert.deepEqual(finish, ['length']);
      assert.equal(chunks.at(-1).usage.completion_tokens, 800);
    }
    const p = await plain;
    assert.equal(p.status, 200);
    assert.equal(p.json.choices[0].finish_reason, 'length');
    assert.equal(p.json.usage.completion_tokens, 600);

    const exit = await within(server.exit, 65000);
    assert.ok(exit, `the server did not exit within --shutdown-timeout:\n${server.output}`);
    assert.equal(exit.code, 0, server.output);
    assert.ok(Date.now() - t0 < 60000);
    await refused(server);  // closed: refused
  });

  it('requests still running at --shutdown-timeout end with finish_reason abort and [DONE]', async () => {
    const server = await startServer({ args: ['--shutdown-timeout', '1', '--max-model-len', '4096'] });
    const s = await inFlight(server, 'too long', 3800);
    const t0 = Date.now();
    server.proc.kill('SIGTERM');
    const chunks = await s.done;
    const finish = chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
    assert.deepEqual(finish, ['abort']);
    const exit = await within(server.exit, 15000);
    assert.ok(exit, 'the server exits soon after the deadline');
    assert.equal(exit.code, 0, server.output);
    assert.ok(Date.now() - t0 < 15000);
  });

  it('a second signal exits at once', async () => {
    const server = await startServer({ args: ['--shutdown-timeout', '60', '--max-model-len', '4096'] });
    const s = await inFlight(server, 'long', 3800);
    s.done.catch(() => {});  // the stream is cut when the process goes
    server.proc.kill('SIGTERM');
    await waitFor(async () => (await fetch(`${server.url}/health`)).status === 503, { what: 'draining' });
    const t0 = Date.now();
    server.proc.kill('SIGINT');
    const exit = await within(server.exit, 10000);
    assert.ok(exit, 'the second signal ends the drain');
    assert.equal(exit.code, 0);
    assert.ok(Date.now() - t0 < 10000);
  });
});
