// `m3 serve --tensor-parallel-size 2 --device cpu`: the server starts its own two CPU ranks (mpirun under the
// hood) and answers exactly as one rank does; a rank that dies or hangs takes the server down with /health
// 503 first and a non-zero exit, and streaming clients get an error, not a hang; SIGTERM drains and stops
// every rank with status 0. The same server with data-parallel attention (DEP) spreads requests over its
// ranks and fails the same way when one dies.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { MODEL_NAME, startServer, waitFor } from './lib/harness.mjs';

const TP2 = ['--device', 'cpu', '--tensor-parallel-size', '2'];

// The worker rank's pid, from rank 0's start-up report ("rank 1 of 2 on HOST (pid N): weights ...").
function workerPid(server) {
  const m = server.output.match(/rank 1 of 2 on \S+ \(pid (\d+)\)/);
  assert.ok(m, `no per-rank report in the output:\n${server.output}`);
  return Number(m[1]);
}

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function chat(server, content, max_tokens) {
  const r = await server.openai().chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content }], max_tokens, temperature: 0, ignore_eos: true,
  });
  return r.choices[0].message;
}

// Starts a streaming request; once its first chunk arrived, returns {ended}: a promise of how the stream ended,
// 'complete' or 'error: ...'.
async function streamOutcome(server, maxTokens) {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_NAME, messages: [{ role: 'user', content: 'count' }],
                           max_tokens: maxTokens, ignore_eos: true, stream: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  await reader.read();  // the first chunk: the request is running
  const ended = (async () => {
    let text = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
    } catch (e) {
      return `error: ${e.message}`;
    }
    return text.includes('data: [DONE]') ? 'complete' : 'error: the stream ended without [DONE]';
  })();
  return { ended };
}

describe('tensor parallel over self-spawned CPU ranks', () => {
  it('answers exactly as one rank does, and reports memory per rank', async () => {
    const one = await startServer({ args: ['--device', 'cpu'] });
    const two = await startServer({ args: TP2 });
    try {
      for (const prompt of ['Hello there', 'Write a haiku about sparse attention']) {
        assert.deepEqual(await chat(two, prompt, 24), await chat(one, prompt, 24), prompt);
      }
      assert.match(two.output, /rank 0 of 2 on \S+ \(pid \d+\): weights [\d.]+ MiB, KV cache [\d.]+ MiB/);
      assert.match(two.output, /rank 1 of 2 on \S+ \(pid \d+\): weights [\d.]+ MiB, KV cache [\d.]+ MiB/);
    } finally {
      assert.equal((await one.stop()).code, 0, one.output);
    }
    // SIGTERM drains: an in-flight request completes, every rank stops, the status is 0.
    const worker = workerPid(two);
    const { ended: outcome } = await streamOutcome(two, 64);
    const exit = await two.stop('SIGTERM');
    assert.equal(await outcome, 'complete');
    assert.equal(exit.code, 0, two.output);
    assert.equal(alive(worker), false, 'the worker rank outlived the server');
  });

  it('a killed rank stops the server: /health 503 first, then a non-zero exit; streams end in an error', async () => {
    const server = await startServer({ args: TP2 });
    const { ended: outcome } = await streamOutcome(server, 100000);
    const killedAt = Date.now();
    process.kill(workerPid(server), 'SIGKILL');
    await waitFor(async () => (await fetch(`${server.url}/health`)).status === 503,
                  { timeoutMs: 2000, intervalMs: 20, what: '/health 503 after a rank died' });
    const exit = await Promise.race([server.exit, new Promise((r) => setTimeout(() => r(null), 15000))]);
    assert.ok(exit, `the server still runs 15 s after a rank died:\n${server.output}`);
    assert.notEqual(exit.code, 0, server.output);
    assert.ok(Date.now() - killedAt < 15000);
    assert.match(await outcome, /^error/);
    assert.match(server.output, /lost a rank: rank 1 \(pid \d+ on \S+\) exited/);
  });

  it('a hung rank stops the server after --dist-timeout', async () => {
    const server = await startServer({ args: [...TP2, '--dist-timeout', '2'] });
    const worker = workerPid(server);
    process.kill(worker, 'SIGSTOP');
    try {
      const answer = server.openai().chat.completions.create({
        model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
      }).then(() => 'answered', (e) => `error: ${e.message}`);
      const exit = await Promise.race([server.exit, new Promise((r) => setTimeout(() => r(null), 20000))]);
      assert.ok(exit, `the server still runs 20 s after a rank hung:\n${server.output}`);
      assert.notEqual(exit.code, 0, server.output);
      assert.match(await answer, /^error/);
      assert.match(server.output, /did not complete in 2\.0+ s \(--dist-timeout\)/);
    } finally {
      try {
        process.kill(worker, 'SIGKILL');
      } catch { /* already gone */ }
    }
  });
});

const DEP2 = ['--device', 'cpu', '--data-parallel-size', '2', '--enable-expert-parallel'];

describe('data-parallel attention with the experts over the ranks (DEP) on self-spawned CPU ranks', () => {
  it('spreads concurrent requests over the ranks and answers as one rank does', async () => {
    const one = await startServer({ args: ['--device', 'cpu'] });
    const dep = await startServer({ args: DEP2 });
    try {
      const prompts = ['Hello there', 'Write a haiku about sparse attention', 'count to ten', 'What is MSA?'];
      const want = [];
      for (const p of prompts) want.push(await chat(one, p, 24));
      assert.deepEqual(await Promise.all(prompts.map((p) => chat(dep, p, 24))), want);
      const metrics = await (await fetch(`${dep.url}/metrics`)).text();
      for (const rank of [0, 1]) {
        const m = metrics.match(new RegExp(`m3:dp_rank_requests_total\\{[^}]*dp_rank="${rank}"\\} (\\d+)`));
        assert.ok(m && Number(m[1]) > 0, `DP rank ${rank} was given no request:\n${metrics}`);
      }
      const routed = [...metrics.matchAll(/m3:moe_expert_tokens_total\{[^}]*expert="\d+"\} (\d+)/g)];
      assert.ok(routed.length > 0 && routed.some((m) => Number(m[1]) > 0), `no expert load:\n${metrics}`);
    } finally {
      assert.equal((await one.stop()).code, 0, one.output);
      assert.equal((await dep.stop()).code, 0, dep.output);
    }
  });

  it('a killed rank stops the server with a non-zero exit; streams end in an error', async () => {
    const server = await startServer({ args: DEP2 });
    const { ended: outcome } = await streamOutcome(server, 100000);
    process.kill(workerPid(server), 'SIGKILL');
    const exit = await Promise.race([server.exit, new Promise((r) => setTimeout(() => r(null), 15000))]);
    assert.ok(exit, `the server still runs 15 s after a rank died:\n${server.output}`);
    assert.notEqual(exit.code, 0, server.output);
    assert.match(await outcome, /^error/);
  });
});
