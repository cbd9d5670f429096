// Reasoning and tool calls on the OpenAI chat endpoint, with the scripted backend emitting exact MiniMax-M3
// text: reasoning_content / reasoning vs content in every thinking mode, tool_calls and finish_reason
// "tool_calls", tool results rendered into the next turn, tool_choice none / auto / required / named, stop
// strings; every streamed answer must equal the non-streamed one.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { MODEL_NAME, expectOpenAIError, postJSON, startServer } from './lib/harness.mjs';
import { NS, SCRIPT, TIME_TOOL, WEATHER_TOOL } from './lib/script.mjs';

let server, client;

before(async () => {
  server = await startServer({ script: SCRIPT, args: ['--max-model-len', '4096'] });
  client = server.openai();
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

// Non-streaming and streaming answers of one request, the streamed one reassembled the way clients do.
async function both(body) {
  const req = { model: MODEL_NAME, max_tokens: 200, ...body };
  const full = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const got = { content: '', reasoning: '', reasoning_content: '', tool_calls: [], finish_reason: null };
  let sawReasoning = false;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta;
    got.content += d.content ?? '';
    if (d.reasoning !== undefined) sawReasoning = true;
    got.reasoning += d.reasoning ?? '';
    got.reasoning_content += d.reasoning_content ?? '';
    for (const t of d.tool_calls ?? []) {
      const slot = (got.tool_calls[t.index] ??= { id: '', type: '', function: { name: '', arguments: '' } });
      if (t.id) slot.id = t.id;
      if (t.type) slot.type = t.type;
      if (t.function?.name) slot.function.name += t.function.name;
      slot.function.arguments += t.function?.arguments ?? '';
    }
    if (c.finish_reason) got.finish_reason = c.finish_reason;
  }
  return { full, msg: full.choices[0].message, finish: full.choices[0].finish_reason, streamed: got, sawReasoning };
}

function assertSame(r) {
  const { msg, streamed } = r;
  assert.equal(streamed.content, msg.content ?? '', 'streamed content equals non-streamed');
  assert.equal(streamed.reasoning, msg.reasoning ?? '', 'streamed reasoning equals non-streamed');
  assert.equal(streamed.reasoning_content, msg.reasoning_content ?? '');
  assert.equal(streamed.finish_reason, r.finish);
  const calls = (msg.tool_calls ?? []).map((c) => ({ name: c.function.name, args: JSON.parse(c.function.arguments) }));
  const scalls = streamed.tool_calls.map((c) => ({ name: c.function.name, args: JSON.parse(c.function.arguments) }));
  assert.deepEqual(scalls, calls, 'streamed tool calls equal non-streamed');
}

const user = (text) => [{ role: 'user', content: text }];
const mode = (m) => (m ? { chat_template_kwargs: { thinking_mode: m } } : {});

describe('reasoning in every thinking mode', () => {
  const cases = [
    { name: 'enabled', tag: '[enabled]', mode: 'enabled', reasoning: 'The user wants 2+2. That is 4.',
      content: '2 + 2 = 4.' },
    { name: 'disabled', tag: '[disabled]', mode: 'disabled', reasoning: null,
      content: 'Paris is the capital of France.' },
    { name: 'disabled with a stray </mm:think>', tag: '[disabled-stray]', mode: 'disabled', reasoning: null,
      content: 'Paris, directly.' },
    { name: 'adaptive, thinking', tag: '[adaptive-think]', mode: 'adaptive', reasoning: 'Short thought.',
      content: 'Adaptive answer.' },
    { name: 'adaptive, not thinking', tag: '[adaptive-plain]', mode: 'adaptive', reasoning: null,
      content: 'Plain adaptive answer.' },
    { name: 'undefined mode renders as adaptive', tag: '[adaptive-think]', mode: null, reasoning: 'Short thought.',
      content: 'Adaptive answer.' },
    { name: 'enabled, cut off inside reasoning', tag: '[unterminated]', mode: 'enabled',
      reasoning: 'Still thinking and never closing', content: '' },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const r = await both({ messages: user(`Question ${c.tag}`), ...mode(c.mode) });
      assert.equal(r.msg.reasoning_content, c.reasoning);
      assert.equal(r.msg.reasoning, c.reasoning, 'vLLM name `reasoning` mirrors reasoning_content');
      assert.equal(r.msg.content, c.content);
      assert.equal(r.finish, 'stop');
      assert.equal(r.msg.tool_calls, undefined);
      const details = r.full.usage.completion_tokens_details;
      if (c.reasoning) assert.ok(details.reasoning_tokens > 0, JSON.stringify(r.full.usage));
      else assert.equal(details.reasoning_tokens, 0, JSON.stringify(r.full.usage));
      assert.ok(details.reasoning_tokens <= r.full.usage.completion_tokens);
      assertSame(r);
    });
  }

  it('thinking_token_budget ends the reasoning after that many tokens; reasoning_effort none disables it', async () => {
    const r = await both({ messages: user('Question [enabled]'), ...mode('enabled'), thinking_token_budget: 3 });
    const whole = 'The user wants 2+2. That is 4.';
    assert.ok(r.msg.reasoning_content.length > 0 && r.msg.reasoning_content.length < whole.length &&
              whole.startsWith(r.msg.reasoning_content), `cut reasoning: ${JSON.stringify(r.msg.reasoning_content)}`);
    assert.ok(r.msg.content.length > 0, 'the answer goes on after the forced </mm:think>');
    assertSame(r);
    const t = await postJSON(server, '/tokenize', { messages: user('hi'), reasoning_effort: 'none' });
    const d = await postJSON(server, '/tokenize', { messages: user('hi'), ...mode('disabled') });
    assert.equal(t.json.prompt, d.json.prompt);
    const bad = await postJSON(server, '/v1/chat/completions', { model: MODEL_NAME, messages: user('x'),
                                                                 thinking_token_budget: -2 });
    expectOpenAIError(assert, bad, 400, 'thinking_token_budget');
    const ids = await postJSON(server, '/v1/chat/completions', { model: MODEL_NAME, messages: user('x'),
                                                                 prompt_token_ids: [1, 2, 3],
                                                                 thinking_token_budget: 4 });
    expectOpenAIError(assert, ids, 400, 'thinking_token_budget');
  });

  it('the generation prompt ends as the template says for each mode', async () => {
    const ends = { enabled: '<mm:think>', disabled: '</mm:think>', adaptive: ']~b]ai\n' };
    for (const [m, end] of Object.entries(ends)) {
      const t = await postJSON(server, '/tokenize', { messages: user('hi'), ...mode(m) });
      assert.ok(t.json.prompt.endsWith(end), `${m}: ${JSON.stringify(t.json.prompt.slice(-30))}`);
    }
  });

  it('user text with think markers cannot open reasoning (no special-token injection)', async () => {
    const t = await postJSON(server, '/tokenize', { messages: user('fake <mm:think> and </mm:think> and ' +
                                                                    `${NS}<tool_call>`) });
    assert.equal(t.status, 200, t.text);
    const specials = [200052, 200058, 200059, 200060];
    const promptIds = t.json.tokens;
    // The template's own markers: one </mm:think> etc. may appear in the system text; the user's must not.
    const userStart = t.json.prompt.lastIndexOf(']~b]user\n');
    const before = await postJSON(server, '/tokenize', { prompt: t.json.prompt.slice(0, userStart) });
    const userIds = promptIds.slice(before.json.count);
    assert.ok(!userIds.some((id) => specials.includes(id)), `user text became special tokens: ${userIds}`);
  });
});

describe('tool calls', () => {
  const tools = [WEATHER_TOOL, TIME_TOOL];

  it('a call is parsed into tool_calls with typed arguments and finish_reason tool_calls', async () => {
    const r = await both({ messages: user('Weather? [weather]'), tools, ...mode('adaptive') });
    assert.equal(r.finish, 'tool_calls');
    assert.equal(r.msg.content, 'Let me check.');
    assert.equal(r.msg.reasoning_content, 'I need the weather tool.');
    assert.equal(r.msg.tool_calls.length, 1);
    const call = r.msg.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(typeof call.id === 'string' && call.id.length >= 8);
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 3 });
    assert.ok(r.streamed.tool_calls[0].id.length >= 8);
    assert.equal(r.streamed.tool_calls[0].type, 'function');
    assertSame(r);
  });

  it('parallel calls in one block', async () => {
    const r = await both({ messages: user('Two things [parallel]'), tools });
    assert.equal(r.finish, 'tool_calls');
    assert.equal(r.msg.content, null);
    assert.deepEqual(r.msg.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
                     [['get_weather', { city: 'Oslo' }], ['get_time', { city: 'Tokyo' }]]);
    assert.notEqual(r.msg.tool_calls[0].id, r.msg.tool_calls[1].id);
    assertSame(r);
  });

  it('string values keep newlines and markup verbatim', async () => {
    const r = await both({ messages: user('[multiline]'), tools });
    assert.deepEqual(JSON.parse(r.msg.tool_calls[0].function.arguments), { city: 'New\nYork <b>&' });
    assertSame(r);
  });

  it('the tool result is rendered into the next turn and answered', async () => {
    const first = await client.chat.completions.create({ model: MODEL_NAME, messages: user('Weather? [weather]'),
                                                         tools });
    const call = first.choices[0].message.tool_calls[0];
    const messages = [
      ...user('Weather? [weather]'),
      first.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '18 degrees and sunny' },
    ];
    const t = await postJSON(server, '/tokenize', { messages, tools });
    assert.equal(t.status, 200, t.text);
    assert.ok(t.json.prompt.includes(`${NS}<invoke name="get_weather">${NS}<city>Paris${NS}</city>${NS}<days>3` +
                                     `${NS}</days>${NS}</invoke>\n${NS}</tool_call>`), t.json.prompt);
    assert.ok(t.json.prompt.includes('<mm:think>I need the weather tool.</mm:think>Let me check.'), t.json.prompt);
    assert.ok(t.json.prompt.includes(']~b]tool\n<response>18 degrees and sunny</response>[e~[\n]~b]ai\n'));
    const second = await both({ messages, tools });
    assert.equal(second.msg.content, 'It is 18 degrees and sunny in Paris.');
    assert.equal(second.finish, 'stop');
    assertSame(second);
  });

  it('tool_choice none: tools are not parsed', async () => {
    const r = await both({ messages: user('Weather? [weather]'), tools, tool_choice: 'none' });
    assert.equal(r.msg.tool_calls, undefined);
    assert.equal(r.finish, 'stop');
    assert.ok(r.msg.content.startsWith('Let me check.'));
    assertSame(r);
  });

  it('tool_choice auto / required / named parse the call', async () => {
    // A forced choice admits only the markup after the reasoning (its grammar), so it gets the script without
    // prose before the call.
    for (const tool_choice of ['auto', 'required', { type: 'function', function: { name: 'get_weather' } }]) {
      const tag = tool_choice === 'auto' ? '[weather]' : '[weather-call]';
      const r = await both({ messages: user(`Weather? ${tag}`), tools, tool_choice });
      assert.equal(r.finish, 'tool_calls', JSON.stringify(tool_choice));
      assert.equal(r.msg.tool_calls[0].function.name, 'get_weather');
      assertSame(r);
    }
  });

  it('a named tool_choice renders only that tool', async () => {
    const named = { type: 'function', function: { name: 'get_time' } };
    const r = await client.chat.completions.create({ model: MODEL_NAME, messages: user('x'), tools,
                                                     tool_choice: named, max_tokens: 5 });
    const all = await client.chat.completions.create({ model: MODEL_NAME, messages: user('x'), tools, max_tokens: 5 });
    assert.ok(r.usage.prompt_tokens < all.usage.prompt_tokens);
  });

  it('max_tokens that cuts a call in half finishes with length and no complete-looking call', async () => {
    // The scripted call is 40-odd tokens: every cut point from inside the markup to past the last parameter.
    let sawPartialCall = false;
    for (let max_tokens = 16; max_tokens <= 40; ++max_tokens) {
      const r = await both({ messages: user('Weather? [weather]'), tools, max_tokens });
      assert.equal(r.finish, 'length', `max_tokens ${max_tokens}`);
      assertSameTextOnly(r);
      for (const c of r.msg.tool_calls ?? []) {
        sawPartialCall = true;
        let args = null;
        try { args = JSON.parse(c.function.arguments); } catch { /* cut-off JSON: fine */ }
        if (args !== null) {
          assert.deepEqual(args, { city: 'Paris', days: 3 },
                           `max_tokens ${max_tokens}: a cut-off call looks complete: ${c.function.arguments}`);
        }
      }
    }
    assert.ok(sawPartialCall, 'some cut points fall inside the invoke');
  });
});

function assertSameTextOnly(r) {
  assert.equal(r.streamed.content, r.msg.content ?? '');
  assert.equal(r.streamed.reasoning, r.msg.reasoning ?? '');
  assert.equal(r.streamed.finish_reason, r.finish);
  assert.deepEqual(r.streamed.tool_calls.map((c) => c.function.arguments),
                   (r.msg.tool_calls ?? []).map((c) => c.function.arguments));
}

describe('stop strings on known text', () => {
  it('stop excludes the stop string; include_stop_str_in_output keeps it', async () => {
    const r = await both({ messages: user('[stop]'), stop: ['gamma', 'delta'] });
    assert.equal(r.msg.content, 'Alpha beta ');
    assert.equal(r.finish, 'stop');
    assert.equal(r.full.choices[0].stop_reason, 'gamma');
    assertSame(r);
    const k = await both({ messages: user('[stop]'), stop: 'delta', include_stop_str_in_output: true });
    assert.equal(k.msg.content, 'Alpha beta gamma delta');
    assertSame(k);
  });

  it('EOS finishes with stop and a null stop_reason', async () => {
    const r = await client.chat.completions.create({ model: MODEL_NAME, messages: user('plain'), max_tokens: 50 });
    assert.equal(r.choices[0].message.content, 'Hello from the script.');
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].stop_reason, null);
    assert.equal(r.usage.completion_tokens, 6, 'five text tokens and the EOS');
  });
});
