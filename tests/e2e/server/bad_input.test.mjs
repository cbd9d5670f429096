// The bad-input table (landscape.md §4.9) against a server with API keys, a small body limit and a short
// context: every row that applies to a text-only server must get the right 4xx in the OpenAI shape
// {"error": {message, type, param, code}} (or the Anthropic shape on /v1/messages), never a 5xx, and the
// server must stay healthy afterwards. Rows 43-46 (disconnects, overload, drain) live in load / drain tests.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';

import { MODEL_NAME, expectAnthropicError, expectOpenAIError, postJSON, startServer } from './lib/harness.mjs';

const KEY = 'sk-e2e-test-key';
const MAX_LEN = 512;
const BODY_LIMIT = 65536;
let server;
const auth = { Authorization: `Bearer ${KEY}` };

before(async () => {
  server = await startServer({ args: ['--api-key', KEY, '--max-body-bytes', String(BODY_LIMIT),
                                      '--max-model-len', String(MAX_LEN)] });
});
after(async () => {
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200, 'the server is still healthy after every bad request');
  const m = await server.metrics();
  assert.equal(m['m3:http_responses_total{model_name="minimax-m3",status="500"}'], undefined,
               'no request ended in a 500');
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

const chat = (body, headers = auth) => postJSON(server, '/v1/chat/completions',
                                                 { model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }],
                                                   max_tokens: 4, ...body }, headers);
const complete = (body, headers = auth) => postJSON(server, '/v1/completions',
                                                     { model: MODEL_NAME, prompt: 'hi', max_tokens: 4, ...body },
                                                     headers);
const messages = (body, headers = { 'x-api-key': KEY }) =>
  postJSON(server, '/v1/messages', { model: MODEL_NAME, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
                                     ...body }, headers);

describe('HTTP level (rows 1-10)', () => {
  it('1: invalid JSON is a 400 naming the parse error', async () => {
    const r = await postJSON(server, '/v1/chat/completions', '{"model":', auth);
    expectOpenAIError(assert, r, 400);
    assert.match(r.json.error.message, /JSON/);
  });

  it('2: JSON that is not an object is a 400', async () => {
    for (const body of ['[]', '"hi"', 'null', '42']) {
      expectOpenAIError(assert, await postJSON(server, '/v1/chat/completions', body, auth), 400);
      expectOpenAIError(assert, await postJSON(server, '/v1/completions', body, auth), 400);
    }
  });

  it('3: a non-JSON Content-Type is a 415; JSON with a charset is accepted', async () => {
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'text/plain', ...auth },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    expectOpenAIError(assert, { status: r.status, json: await r.json(), text: '' }, 415);
    const ok = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json; charset=utf-8', ...auth },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    assert.equal(ok.status, 200);
  });

  it('4: a body over --max-body-bytes is a 413', async () => {
    const r = await chat({ messages: [{ role: 'user', content: 'x'.repeat(BODY_LIMIT + 10) }] });
    expectOpenAIError(assert, r, 413);
  });

  it('5: too many or too large headers are a 431; the server stays up', async () => {
    // The status code of a raw request (the socket is ended by us once the status line is in).
    const rawStatus = (head) => new Promise((resolve, reject) => {
      const sock = net.connect(server.port, '127.0.0.1');
      let data = '';
      const done = () => { sock.destroy(); resolve(Number((data.match(/^HTTP\/1\.1 (\d+)/) ?? [])[1] ?? 0)); };
      sock.on('data', (d) => { data += d; if (/\r\n\r\n/.test(data)) done(); });
      sock.on('error', done);
      sock.on('close', done);
      sock.setTimeout(10000, () => { sock.destroy(); reject(new Error('no answer to oversized headers')); });
      sock.write(`GET /health HTTP/1.1\r\nHost: x\r\n${head}\r\n`);
    });
    const many = Array.from({ length: 500 }, (_, i) => `X-H${i}: v\r\n`).join('');
    assert.equal(await rawStatus(many), 431);
    const large = Array.from({ length: 10 }, (_, i) => `X-L${i}: ${'v'.repeat(5000)}\r\n`).join('');
    assert.equal(await rawStatus(large), 431);
    // One header line over the whole head limit (32 KiB) is refused too (431, or 400 from the parser).
    const line = await rawStatus(`X-Big: ${'a'.repeat(100000)}\r\n`);
    assert.ok(line === 431 || line === 400, `one huge header line: ${line}`);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });

  it('6-7: a client trickling headers or never finishing a chunked body does not block others', async () => {
    const slow = net.connect(server.port, '127.0.0.1');
    slow.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    const chunked = net.connect(server.port, '127.0.0.1');
    chunked.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
                  `Authorization: Bearer ${KEY}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"mod\r\n`);
    try {
      for (let i = 0; i < 3; ++i) assert.equal((await chat({})).status, 200);
      assert.equal((await fetch(`${server.url}/health`)).status, 200);
    } finally {
      slow.destroy();
      chunked.destroy();
    }
  });

  it('8: invalid UTF-8 and lone surrogates are a 400', async () => {
    const bad = Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"a'), Buffer.from([0xff, 0xfe]),
                               Buffer.from('"}],"max_tokens":2}')]);
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', ...auth }, body: bad,
    });
    expectOpenAIError(assert, { status: r.status, json: await r.json(), text: '' }, 400);
    const s = await postJSON(server, '/v1/chat/completions',
                             '{"messages":[{"role":"user","content":"\\ud800"}],"max_tokens":2}', auth);
    expectOpenAIError(assert, s, 400);
  });

  it('9: deep nesting is a 400, not a crash', async () => {
    const deep = `{"messages":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    expectOpenAIError(assert, await postJSON(server, '/v1/chat/completions', deep, auth), 400);
    const deepObj = `{"a":${'{"a":'.repeat(3000)}1${'}'.repeat(3000)}}`;
    expectOpenAIError(assert, await postJSON(server, '/v1/completions', deepObj, auth), 400);
  });

  it('10: an unknown route is a 404; a wrong method is a 405 with Allow', async () => {
    const r = await fetch(`${server.url}/v1/nope`, { headers: auth });
    expectOpenAIError(assert, { status: r.status, json: await r.json(), text: '' }, 404);
    const p = await postJSON(server, '/v1/embeddings', { input: 'x' }, auth);
    expectOpenAIError(assert, p, 404);
    const m = await fetch(`${server.url}/v1/chat/completions`, { headers: auth });
    expectOpenAIError(assert, { status: m.status, json: await m.json(), text: '' }, 405);
    assert.match(m.headers.get('allow') ?? '', /POST/);
  });
});

describe('auth (rows 11-12)', () => {
  it('11: a missing or wrong key is a 401 on every model route', async () => {
    for (const headers of [{}, { Authorization: 'Bearer wrong' }, { 'x-api-key': 'wrong' },
                           { Authorization: `Bearer ${KEY}x` }, { Authorization: KEY }]) {
      const r = await chat({}, headers);
      expectOpenAIError(assert, r, 401);
      assert.equal(r.json.error.type, 'authentication_error');
      expectOpenAIError(assert, await complete({}, headers), 401);
      expectAnthropicError(assert, await messages({}, headers), 401, 'authentication_error');
      const models = await fetch(`${server.url}/v1/models`, { headers });
      assert.equal(models.status, 401);
    }
  });

  it('12: Bearer and x-api-key are both accepted on both APIs; /health and /metrics stay open', async () => {
    assert.equal((await chat({}, { Authorization: `Bearer ${KEY}` })).status, 200);
    assert.equal((await chat({}, { 'x-api-key': KEY })).status, 200);
    assert.equal((await messages({}, { 'x-api-key': KEY })).status, 200);
    assert.equal((await messages({}, { Authorization: `Bearer ${KEY}` })).status, 200);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    assert.equal((await fetch(`${server.url}/metrics`)).status, 200);
  });

  it('the official clients authenticate with the key and fail cleanly without it', async () => {
    const ok = server.openai({ apiKey: KEY });
    const r = await ok.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: 'hi' }],
                                                max_tokens: 2 });
    assert.equal(r.choices.length, 1);
    await assert.rejects(server.openai({ apiKey: 'wrong' }).models.list(), (e) => e.status === 401);
    const a = server.anthropic({ apiKey: KEY });
    const m = await a.messages.create({ model: MODEL_NAME, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(m.type, 'message');
    const bearer = server.anthropic({ apiKey: null, authToken: KEY });
    assert.equal((await bearer.messages.countTokens({ model: MODEL_NAME, messages: [{ role: 'user', content: 'x' }] }))
      .input_tokens > 0, true);
    await assert.rejects(server.anthropic({ apiKey: 'wrong' }).messages.create({
      model: MODEL_NAME, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
    (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
  });
});

describe('request fields (rows 13-21)', () => {
  it('13: an unknown model is a 404', async () => {
    const r = await chat({ model: 'gpt-4' });
    expectOpenAIError(assert, r, 404);
    assert.match(r.json.error.message, /gpt-4/);
    expectOpenAIError(assert, await complete({ model: 'gpt-4' }), 404);
    expectAnthropicError(assert, await messages({ model: 'gpt-4' }), 404, 'not_found_error');
  });

  it('14: missing messages / prompt / Anthropic max_tokens is a 400 naming the field', async () => {
    expectOpenAIError(assert, await postJSON(server, '/v1/chat/completions', { max_tokens: 2 }, auth), 400, 'messages');
    expectOpenAIError(assert, await postJSON(server, '/v1/completions', { max_tokens: 2 }, auth), 400, 'prompt');
    const r = await postJSON(server, '/v1/messages', { messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': KEY });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    assert.match(r.json.error.message, /max_tokens/);
    expectAnthropicError(assert, await postJSON(server, '/v1/messages', { max_tokens: 3 }, { 'x-api-key': KEY }),
                         400, 'invalid_request_error');
  });

  it('15: messages [] is a 400', async () => {
    expectOpenAIError(assert, await chat({ messages: [] }), 400, 'messages');
    expectAnthropicError(assert, await messages({ messages: [] }), 400);
  });

  it('16: wrong types are a 400 naming the field (no coercion)', async () => {
    const cases = [['max_tokens', '10'], ['temperature', 'hot'], ['stream', 'yes'], ['n', 1.5], ['top_p', '0.5'],
                   ['seed', 'abc'], ['stop', 5], ['logprobs', 'yes'], ['messages', 'hi'], ['max_tokens', true]];
    for (const [field, value] of cases) {
      const r = await chat({ [field]: value });
      expectOpenAIError(assert, r, 400, field);
    }
    expectOpenAIError(assert, await complete({ prompt: 5 }), 400, 'prompt');
    expectAnthropicError(assert, await messages({ max_tokens: '10' }), 400);
    expectAnthropicError(assert, await messages({ temperature: 'hot' }), 400);
  });

  it('17: an unknown role or content part type is a 400', async () => {
    expectOpenAIError(assert, await chat({ messages: [{ role: 'wizard', content: 'hi' }] }), 400, 'messages');
    expectOpenAIError(assert, await chat({ messages: [{ content: 'hi' }] }), 400, 'messages');
    expectOpenAIError(assert, await chat({ messages: [{ role: 'user', content: [{ type: 'hologram', text: 'x' }] }] }),
                      400, 'messages');
    // role "system" inside messages is what Claude Code sends: accepted (folded into the conversation).
    expectAnthropicError(assert, await messages({ messages: [{ role: 'wizard', content: 'hi' }] }), 400);
    expectAnthropicError(assert, await messages({ messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }),
                         400, 'invalid_request_error');
  });

  it('18: a truncated image is a 400 naming the part', async () => {
    const img = { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } };
    const r = await chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'what is this' }, img] }] });
    expectOpenAIError(assert, r, 400, 'messages');
    assert.match(r.json.error.message, /messages\[0\]\.content\[1\].*PNG/);
    const a = await messages({ messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] });
    expectAnthropicError(assert, a, 400, 'invalid_request_error');
  });

  it('19: a tool message without a preceding tool call is a 400', async () => {
    const r = await chat({ messages: [{ role: 'user', content: 'hi' },
                                      { role: 'tool', tool_call_id: 'call_x', content: 'result' }] });
    expectOpenAIError(assert, r, 400);
  });

  it('20: unknown extra fields are ignored', async () => {
    const r = await chat({ user: 'u-1', metadata: { a: 1 }, some_vendor_extra: [1, 2] });
    assert.equal(r.status, 200, r.text);
    assert.equal((await messages({ metadata: { user_id: 'u' }, some_extra: true })).status, 200);
  });

  it('21: known but unsupported parameters are a 400', async () => {
    expectOpenAIError(assert, await complete({ best_of: 2 }), 400, 'best_of');
    expectOpenAIError(assert, await chat({ response_format: { type: 'json_schema',
                                                              json_schema: { name: 'x', schema: { not: {} } } } }),
                      400, 'response_format');
    expectOpenAIError(assert, await chat({ response_format: { type: 'structural_tag' } }), 400,
                      'response_format.type');
    expectOpenAIError(assert, await complete({ echo: true }), 400, 'echo');
    expectOpenAIError(assert, await complete({ suffix: 'tail' }), 400, 'suffix');
    assert.equal((await chat({ response_format: { type: 'text' } })).status, 200);
  });
});

describe('limits and ranges (rows 22-35)', () => {
  const longText = Array.from({ length: 700 }, (_, i) => `word${i}`).join(' ');

  it('22: a prompt over the context is a 400 with both numbers', async () => {
    const r = await chat({ messages: [{ role: 'user', content: longText }], max_tokens: undefined });
    expectOpenAIError(assert, r, 400);
    assert.match(r.json.error.message, new RegExp(`${MAX_LEN}`));
    const prompt = r.json.error.message.match(/(\d+) tokens\.?$/);
    assert.ok(prompt && Number(prompt[1]) > MAX_LEN, r.json.error.message);
    expectOpenAIError(assert, await complete({ prompt: longText, max_tokens: undefined }), 400);
    expectOpenAIError(assert, await complete({ prompt: Array(MAX_LEN).fill(7), max_tokens: undefined }), 400);
    expectAnthropicError(assert, await messages({ messages: [{ role: 'user', content: longText }] }), 400);
  });

  it('23: prompt + max_tokens over the context is a 400; without max_tokens the rest is used', async () => {
    expectOpenAIError(assert, await complete({ prompt: Array(100).fill(7), max_tokens: MAX_LEN - 99 }), 400,
                      'max_tokens');
    const ok = await complete({ prompt: Array(100).fill(7), max_tokens: MAX_LEN - 100, ignore_eos: true });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.usage.completion_tokens, MAX_LEN - 100);
    const rest = await complete({ prompt: Array(MAX_LEN - 5).fill(7), max_tokens: undefined, ignore_eos: true });
    assert.equal(rest.status, 200, rest.text);
    assert.equal(rest.json.usage.completion_tokens, 5);
    expectAnthropicError(assert, await messages({ max_tokens: MAX_LEN + 1 }), 400);
  });

  it('24: max_tokens 0, negative, 1e12 or beyond int32 is a 400', async () => {
    for (const v of [0, -1, 1e12, 2 ** 31, 2 ** 63]) {
      expectOpenAIError(assert, await chat({ max_tokens: v }), 400, 'max_tokens');
      expectOpenAIError(assert, await complete({ max_tokens: v }), 400, 'max_tokens');
      expectAnthropicError(assert, await messages({ max_tokens: v }), 400);
    }
    expectOpenAIError(assert, await chat({ max_completion_tokens: 0 }), 400);
  });

  it('26: n out of range is a 400', async () => {
    for (const n of [0, -1, 17, 1000]) expectOpenAIError(assert, await chat({ n }), 400, 'n');
  });

  it('27: too many, empty or huge stop strings are a 400; a string or a list is accepted', async () => {
    expectOpenAIError(assert, await chat({ stop: Array.from({ length: 17 }, (_, i) => `s${i}`) }), 400, 'stop');
    expectOpenAIError(assert, await chat({ stop: [''] }), 400, 'stop');
    expectOpenAIError(assert, await chat({ stop: '' }), 400, 'stop');
    expectOpenAIError(assert, await chat({ stop: ['x'.repeat(10000)] }), 400, 'stop');
    assert.equal((await chat({ stop: 'abc' })).status, 200);
    assert.equal((await chat({ stop: ['abc', 'def'] })).status, 200);
    expectAnthropicError(assert, await messages({ stop_sequences: [''] }), 400);
  });

  it('28-30: sampling parameters out of range or NaN are a 400', async () => {
    const cases = [['temperature', -0.1], ['temperature', 2.1], ['top_p', 0], ['top_p', 1.1], ['min_p', -0.1],
                   ['min_p', 1.1], ['top_k', -2], ['presence_penalty', -2.1], ['presence_penalty', 2.1],
                   ['frequency_penalty', -2.5], ['frequency_penalty', 3], ['repetition_penalty', 0],
                   ['repetition_penalty', -1]];
    for (const [field, value] of cases) {
      expectOpenAIError(assert, await chat({ [field]: value }), 400, field);
      expectOpenAIError(assert, await complete({ [field]: value }), 400, field);
    }
    for (const lit of ['NaN', 'Infinity', '-Infinity', '1e999']) {
      const r = await postJSON(server, '/v1/chat/completions',
                               `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":${lit}}`, auth);
      expectOpenAIError(assert, r, 400);
    }
    expectAnthropicError(assert, await messages({ temperature: 3 }), 400);
    expectAnthropicError(assert, await messages({ top_p: 0 }), 400);
    expectAnthropicError(assert, await messages({ top_k: -5 }), 400);
  });

  it('31: top_logprobs over 20 or without logprobs is a 400', async () => {
    expectOpenAIError(assert, await chat({ logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs');
    expectOpenAIError(assert, await chat({ top_logprobs: 2 }), 400, 'top_logprobs');
    expectOpenAIError(assert, await chat({ logprobs: true, top_logprobs: -1 }), 400, 'top_logprobs');
    expectOpenAIError(assert, await complete({ logprobs: 21 }), 400, 'logprobs');
    assert.equal((await chat({ logprobs: true, top_logprobs: 20 })).status, 200);
  });

  it('32: logit_bias with a bad key or value is a 400', async () => {
    for (const lb of [{ abc: 1 }, { '-1': 1 }, { 999999999: 1 }, { 200064: 1 }, { 5: 101 }, { 5: -101 },
                      { 5: 'x' }, { '5x': 1 }, [1, 2]]) {
      expectOpenAIError(assert, await chat({ logit_bias: lb }), 400, 'logit_bias');
    }
    assert.equal((await chat({ logit_bias: { 5: 100, 200063: -100 } })).status, 200);
  });

  it('33: a seed outside int64 or not an integer is a 400', async () => {
    for (const seed of ['18446744073709551616', '1e30', '1.5', '"7"']) {
      const r = await postJSON(server, '/v1/chat/completions',
                               `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"seed":${seed}}`, auth);
      expectOpenAIError(assert, r, 400, 'seed');
    }
    assert.equal((await chat({ seed: -5 })).status, 200);
  });

  it('34: token-id prompts with negative, out-of-vocabulary, nested or empty ids are a 400', async () => {
    for (const prompt of [[-1, 2], [1, 200064], [1, 2 ** 40], [[1, [2]]], [], [[]], [1, 'a'], [1.5, 2], [[1], 5],
                          [null]]) {
      expectOpenAIError(assert, await complete({ prompt }), 400, 'prompt');
    }
    expectOpenAIError(assert, await complete({ prompt: '' }), 400, 'prompt');
    expectOpenAIError(assert, await chat({ prompt_token_ids: [-3], messages: [] }), 400);
  });

  it('35: stream_options without stream is a 400', async () => {
    expectOpenAIError(assert, await chat({ stream_options: { include_usage: true } }), 400, 'stream_options');
    expectOpenAIError(assert, await complete({ stream: false, stream_options: { include_usage: true } }), 400,
                      'stream_options');
  });
});

describe('tools (rows 37-39)', () => {
  const tool = (name, parameters = { type: 'object', properties: {} }) =>
    ({ type: 'function', function: { name, description: 'd', parameters } });

  it('37: duplicate names or names that break the call format are a 400', async () => {
    expectOpenAIError(assert, await chat({ tools: [tool('a'), tool('a')] }), 400, 'tools');
    for (const name of ['a<b', 'a b', 'x>y', 'q"x', ']<]minimax[>[', '']) {
      expectOpenAIError(assert, await chat({ tools: [tool(name)] }), 400, 'tools');
    }
    expectOpenAIError(assert, await chat({ tools: [{ type: 'function', function: { description: 'no name' } }] }),
                      400, 'tools');
    expectOpenAIError(assert, await chat({ tools: 'get_weather' }), 400, 'tools');
    expectAnthropicError(assert, await messages({ tools: [{ name: 'a b', input_schema: { type: 'object' } }] }), 400);
    expectAnthropicError(assert, await messages({ tools: [{ name: 'a', input_schema: { type: 'object' } },
                                                          { name: 'a', input_schema: { type: 'object' } }] }), 400);
  });

  it('37: a tool whose parameters are not a JSON schema object is a 400', async () => {
    expectOpenAIError(assert, await chat({ tools: [tool('f', 'not a schema')] }), 400, 'tools');
    expectOpenAIError(assert, await chat({ tools: [tool('f', 5)] }), 400, 'tools');
  });

  it('38: tool_choice naming an unknown tool, or required without tools, is a 400', async () => {
    const named = (n) => ({ type: 'function', function: { name: n } });
    expectOpenAIError(assert, await chat({ tools: [tool('a')], tool_choice: named('b') }), 400, 'tool_choice');
    expectOpenAIError(assert, await chat({ tool_choice: 'required' }), 400, 'tool_choice');
    expectOpenAIError(assert, await chat({ tool_choice: named('a') }), 400, 'tool_choice');
    expectOpenAIError(assert, await chat({ tools: [tool('a')], tool_choice: 'sometimes' }), 400, 'tool_choice');
    expectAnthropicError(assert, await messages({ tools: [{ name: 'a', input_schema: { type: 'object' } }],
                                                  tool_choice: { type: 'tool', name: 'b' } }), 400);
    expectAnthropicError(assert, await messages({ tool_choice: { type: 'any' } }), 400);
  });

  it('39: tools that overflow the context are a 400', async () => {
    const big = tool('big', { type: 'object', description: 'x '.repeat(3000), properties: {} });
    const r = await chat({ tools: [big] });
    expectOpenAIError(assert, r, 400);
    assert.match(r.json.error.message, /context/);
  });
});

describe('Anthropic-specific rows (41)', () => {
  it('an unknown block type is a 400; thinking history and system blocks are accepted', async () => {
    expectAnthropicError(assert, await messages({ messages: [{ role: 'user', content: [{ type: 'search_result' }] }] }),
                         400, 'invalid_request_error');
    const ok = await messages({
      system: [{ type: 'text', text: 'Be brief.' }],
      messages: [{ role: 'user', content: 'hi' },
                 { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 'abc' },
                                                { type: 'text', text: 'hello' }] },
                 { role: 'user', content: 'again' }],
    });
    assert.equal(ok.status, 200, ok.text);
    expectAnthropicError(assert, await messages({ thinking: { type: 'sometimes' } }), 400);
  });
});

describe('KV capacity (row 25)', () => {
  it('a prompt that can never fit in the KV pool is a 400 at once, never queued', async () => {
    const small = await startServer({ args: ['--num-kv-pages', '2'] });
    try {
      const models = await (await fetch(`${small.url}/v1/models`)).json();
      const maxLen = models.data[0].max_model_len;
      assert.ok(maxLen > 0 && maxLen <= 2 * 128, `max_model_len ${maxLen} is capped by 2 KV pages`);
      const r = await postJSON(small, '/v1/completions', { prompt: Array(maxLen + 10).fill(7), max_tokens: 1 });
      expectOpenAIError(assert, r, 400);
      assert.equal((await small.metrics())['vllm:num_requests_waiting'], 0);
    } finally {
      const { code } = await small.stop();
      assert.equal(code, 0, small.output);
    }
  });
});

describe('request ids (row 51)', () => {
  it('a client X-Request-Id is echoed back', async () => {
    const r = await chat({}, { ...auth, 'X-Request-Id': 'req-e2e-1' });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-request-id'), 'req-e2e-1');
  });
});
