// Claude Code against `m3 serve` (issue "Claude Code works against m3 serve"): `claude -p` with Lambda's
// environment runs multi-turn sessions (resume / continue, json and stream-json) on the random model, recovers
// from the context-limit error, and runs a Bash tool loop on the scripted backend; the recorded Claude Code
// requests (tests/fixtures/claude_code) are answered; the Anthropic SDK's stream, tool runner and inline system
// entries and the OpenAI SDK's runTools complete; and the server rules these clients rely on hold (context
// overflow in Anthropic's shape, /v1/models in both shapes, thinking budget, tool parsers on without flags,
// the tool runner's `thread` field, the default max_tokens).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';

import { MODEL_NAME, REPO, accessLog, expectAnthropicError, expectOpenAIError, postJSON, startServer }
  from './lib/harness.mjs';
import { noisyModel, runClaude, claudeSandbox, streamResult } from './lib/claude_code.mjs';
import { WEATHER_TOOL, toolBlock } from './lib/script.mjs';

// The Bash command prints a marker computed by the shell, so only its real output carries "M3_TOOL_LOOP_42".
const MARKER = 'M3_TOOL_LOOP_42';
const BASH_COMMAND = 'echo M3_TOOL_LOOP_$((40+2)) > marker.txt && cat marker.txt';
const FINAL_TEXT = `The marker file says ${MARKER}.`;
const SCRIPT = [
  { match: MARKER, output: `<mm:think>The command ran.</mm:think>${FINAL_TEXT}` },
  {
    match: '[cc-tool]',
    output: '<mm:think>I will run the command.</mm:think>Running it.' +
            toolBlock([{ name: 'Bash', args: { command: BASH_COMMAND, description: 'Write and show a marker' } }]),
  },
  { match: 'sum=42', output: 'The sum is 42.' },
  { match: '[runner]', output: toolBlock([{ name: 'add', args: { a: '20', b: '22' } }]) },
  { match: 'sum=12', output: 'The OpenAI sum is 12.' },
  { match: '[oai-runner]', output: toolBlock([{ name: 'add', args: { a: '5', b: '7' } }]) },
  { match: '[inline-system-seen]', output: 'The inline system entry was rendered.' },
  { match: '[sdk-stream]', output: '<mm:think>Streaming thoughts.</mm:think>Streamed answer.' },
  { match: '[weather]', output: toolBlock([{ name: 'get_weather', args: { city: 'Paris', days: '2' } }]) },
  { match: '', output: 'Hello from the script.' },
];
const CONTEXT = 65536;  // Claude Code's default first request is ~11.5K tokens (12 tools, 7 KB system, 9 KB inline)
const SMALL_CONTEXT = 4096;

let scripted, bare, noisy, small;

before(async () => {
  const longContext = ['--max-model-len', String(CONTEXT)];
  scripted = await startServer({ script: SCRIPT, args: longContext });
  bare = await startServer({ script: SCRIPT, args: longContext, parsers: false });
  noisy = await startServer({ model: await noisyModel(), args: longContext });
  small = await startServer({ args: ['--max-model-len', String(SMALL_CONTEXT)] });
});
after(async () => {
  for (const s of [scripted, bare, noisy, small]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.output);
  }
});

const user = (text) => [{ role: 'user', content: text }];
const messagesLog = (server) => accessLog(server).filter((e) => e.path.split('?')[0] === '/v1/messages');
const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

// A finished `claude -p` run without an API error; returns its result object.
function okResult(run, result) {
  assert.equal(run.code, 0, `${run.argv}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`);
  assert.ok(result, `no result in the output of ${run.argv}: ${run.stdout}`);
  assert.equal(result.is_error, false, JSON.stringify(result));
  assert.equal(result.subtype, 'success', JSON.stringify(result));
  assert.equal(result.api_error_status ?? null, null, JSON.stringify(result));
  assert.equal(typeof result.result, 'string');
  assert.ok(result.num_turns >= 1, JSON.stringify(result));
  return result;
}

// The whole prompt of a request: Anthropic's usage leaves what was read from the prefix cache out of
// input_tokens (cache_read_input_tokens) and what was written to it (cache_creation_input_tokens).
function totalInput(u) {
  return u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
}

describe('Claude Code (claude -p) on the random model', () => {
  // The CPU model prefills the default 11-12K-token prompt in tens of seconds, so the multi-turn session offers
  // only Bash (`--tools Bash`: the same system blocks, inline system entry and billing header, two tools, ~3K
  // tokens); the default prompt runs once below and in every scripted test.
  it('three turns: json, --resume with stream-json, --continue, no API error', async () => {
    const sandbox = claudeSandbox();
    const env = { CLAUDE_CODE_MAX_OUTPUT_TOKENS: '64' };
    const tools = ['--tools', 'Bash'];
    const before = messagesLog(noisy).length;

    const r1 = await runClaude(noisy, sandbox, 'Say hi.', [...tools, '--output-format', 'json'], { env });
    const first = okResult(r1, r1.json);
    assert.match(first.session_id, /^[0-9a-f-]{36}$/);

    const resume = ['--resume', first.session_id, '--output-format', 'stream-json', '--verbose'];
    const r2 = await runClaude(noisy, sandbox, 'Say hi again.', [...tools, ...resume], { env });
    const second = okResult(r2, r2.json && streamResult(r2.json));
    assert.equal(second.session_id, first.session_id);
    const init = r2.json.find((l) => l.type === 'system' && l.subtype === 'init');
    assert.equal(init?.model, MODEL_NAME, JSON.stringify(init));

    const r3 = await runClaude(noisy, sandbox, 'Bye.', [...tools, '--continue', '--output-format', 'json'], { env });
    const third = okResult(r3, r3.json);
    assert.equal(third.session_id, first.session_id);

    const calls = messagesLog(noisy).slice(before);
    assert.ok(calls.length >= 3, JSON.stringify(calls));
    assert.deepEqual(calls.filter((c) => c.status !== 200), [], 'every /v1/messages call answered 200');
  });

  it('the default prompt: the context-limit error makes Claude Code retry with a max_tokens that fits', async () => {
    // 64000 output tokens + Claude Code's prompt exceed the 65536 context: Anthropic's 400 names both numbers
    // and Claude Code retries with the room that is left.
    const sandbox = claudeSandbox();
    const before = messagesLog(noisy).length;
    const run = await runClaude(noisy, sandbox, 'Say hi.', ['--output-format', 'json'],
                                { env: { CLAUDE_CODE_MAX_OUTPUT_TOKENS: '64000' } });
    okResult(run, run.json);
    const statuses = messagesLog(noisy).slice(before).map((c) => c.status);
    assert.equal(statuses[0], 400, JSON.stringify(statuses));
    assert.equal(statuses.at(-1), 200, JSON.stringify(statuses));
  });
});

describe('Claude Code (claude -p) tool loop on the scripted model', () => {
  async function toolLoop(server, format) {
    const sandbox = claudeSandbox();
    const args = ['--allowedTools', 'Bash', '--max-turns', '4', '--output-format', format,
                  ...(format === 'stream-json' ? ['--verbose'] : [])];
    const run = await runClaude(server, sandbox, 'Run the marker command. [cc-tool]', args);
    const marker = path.join(sandbox.cwd, 'marker.txt');
    assert.ok(fs.existsSync(marker), `Bash did not run the command\n${run.stdout}\n${run.stderr}`);
    assert.equal(fs.readFileSync(marker, 'utf8'), `${MARKER}\n`);
    return run;
  }

  it('Bash runs, its tool_result comes back, the final answer is the result (json)', async () => {
    const before = messagesLog(scripted).length;
    const run = await toolLoop(scripted, 'json');
    const result = okResult(run, run.json);
    assert.equal(result.result, FINAL_TEXT);
    assert.equal(result.num_turns, 2);
    const calls = messagesLog(scripted).slice(before);
    assert.deepEqual(calls.map((c) => c.status), [200, 200]);
  });

  it('stream-json shows the tool_use and the tool_result', async () => {
    const run = await toolLoop(scripted, 'stream-json');
    const lines = run.json;
    assert.ok(lines, run.stdout);
    const blocks = (type) => lines.filter((l) => l.type === type).flatMap((l) => l.message?.content ?? [])
      .filter((b) => typeof b === 'object');
    const use = blocks('assistant').find((b) => b.type === 'tool_use');
    assert.equal(use?.name, 'Bash', JSON.stringify(lines));
    assert.equal(use.input.command, BASH_COMMAND);
    const res = blocks('user').find((b) => b.type === 'tool_result');
    assert.equal(res?.tool_use_id, use.id);
    assert.equal(res.is_error, false, JSON.stringify(res));
    assert.match(JSON.stringify(res.content), new RegExp(MARKER));
    assert.equal(okResult(run, streamResult(lines)).result, FINAL_TEXT);
  });
});

describe("Claude Code's recorded requests (tests/fixtures/claude_code/session.json)", () => {
  it('each is answered 200 and the input grows turn by turn', async () => {
    const session = JSON.parse(fs.readFileSync(path.join(REPO, 'tests/fixtures/claude_code/session.json'), 'utf8'));
    let last = 0;
    for (const [i, req] of session.requests.entries()) {
      const headers = { 'anthropic-version': req.headers['anthropic-version'],
                        'anthropic-beta': req.headers['anthropic-beta'] };
      const body = { ...req.body, stream: false, max_tokens: 32 };
      const r = await postJSON(scripted, `${req.path}?${req.query}`, body, headers);
      assert.equal(r.status, 200, `request ${i}: ${r.text}`);
      assert.equal(r.json.type, 'message');
      const input = totalInput(r.json.usage);
      assert.ok(input > last, `request ${i}: ${input} <= ${last}`);
      last = input;
      const { stream, max_tokens, metadata, ...countable } = body;
      const c = await postJSON(scripted, `/v1/messages/count_tokens?${req.query}`, countable, headers);
      assert.equal(c.status, 200, `request ${i} count_tokens: ${c.text}`);
      assert.equal(c.json.input_tokens, input, `request ${i}`);
    }
  });
});

describe('Anthropic SDK', () => {
  it('messages.stream: events, text, finalMessage', async () => {
    const client = scripted.anthropic();
    const stream = client.messages.stream({ model: MODEL_NAME, max_tokens: 100, messages: user('[sdk-stream]'),
                                            thinking: { type: 'adaptive' } });
    let text = '';
    stream.on('text', (delta) => { text += delta; });
    const types = [];
    for await (const e of stream) types.push(e.type);
    const message = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.ok(types.includes('content_block_delta'));
    assert.equal(text, 'Streamed answer.');
    assert.deepEqual(message.content.map((b) => b.type), ['thinking', 'text']);
    assert.equal(message.content[0].thinking, 'Streaming thoughts.');
    assert.equal(textOf(message), 'Streamed answer.');
    assert.equal(message.stop_reason, 'end_turn');
  });

  // A runnable `add` tool that records its calls.
  function adder(calls) {
    return betaTool({
      name: 'add',
      description: 'Adds two integers',
      inputSchema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
                     required: ['a', 'b'] },
      run: (args) => {
        calls.push(args);
        return `sum=${args.a + args.b}`;
      },
    });
  }

  for (const threaded of [true, false]) {
    const name = threaded ? 'default (message threads: later turns send only the new messages)' : 'thread: false';
    it(`beta.messages.toolRunner, ${name}: the tool runs and the answer sees the whole conversation`, async () => {
      const client = scripted.anthropic();
      const calls = [];
      const tool = adder(calls);
      const runner = client.beta.messages.toolRunner({
        model: MODEL_NAME, max_tokens: 200, system: 'You add numbers.', messages: user('Add them. [runner]'),
        tools: [tool], ...(threaded ? {} : { thread: false }),
      });
      const replies = [];
      for await (const m of runner) replies.push(m);
      assert.deepEqual(calls, [{ a: 20, b: 22 }]);
      assert.equal(replies[0].stop_reason, 'tool_use');
      const final = replies.at(-1);
      assert.equal(textOf(final), 'The sum is 42.');
      assert.equal(final.stop_reason, 'end_turn');
      const use = replies[0].content.find((b) => b.type === 'tool_use');
      const { run, parse, ...wireTool } = tool;  // the definition as the runner sends it
      const whole = await client.messages.countTokens({
        model: MODEL_NAME, system: 'You add numbers.', tools: [wireTool],
        messages: [...user('Add them. [runner]'), { role: 'assistant', content: replies[0].content },
                   { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sum=42' }] }],
      });
      assert.equal(totalInput(final.usage), whole.input_tokens,
                   'the final answer was generated from the system prompt, tools, call and result');
    });
  }

  it('role "system" entries inside messages (as Claude Code sends them) are rendered', async () => {
    const client = scripted.anthropic();
    const messages = [
      { role: 'user', content: [{ type: 'text', text: 'Hello.' }] },
      { role: 'system', content: [{ type: 'text', text: 'Environment notes [inline-system-seen]',
                                    cache_control: { type: 'ephemeral', ttl: '1h' } }] },
    ];
    const r = await client.messages.create({ model: MODEL_NAME, max_tokens: 50, system: 'Top-level.', messages });
    assert.equal(textOf(r), 'The inline system entry was rendered.');
    const later = await client.messages.create({
      model: MODEL_NAME, max_tokens: 50, system: 'Top-level.',
      messages: [...messages, { role: 'assistant', content: 'Hi.' }, { role: 'system', content: 'More notes.' },
                 { role: 'user', content: 'Again.' }],
    });
    assert.equal(later.stop_reason, 'end_turn');
    assert.ok(totalInput(later.usage) > totalInput(r.usage));
  });

  it("Claude Code's x-anthropic-billing-header system block does not reach the prompt", async () => {
    const client = scripted.anthropic();
    const billing = (fp) => ({ type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.332.${fp}; ` +
                                                   'cc_entrypoint=sdk-cli;' });
    const rest = { type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral', ttl: '1h' } };
    const count = async (system) => (await client.messages.countTokens({ model: MODEL_NAME, system,
                                                                         messages: user('x') })).input_tokens;
    const plain = await count([rest]);
    assert.equal(await count([billing('0b8'), rest]), plain);
    assert.equal(await count([billing('f46'), rest]), plain);
  });
});

describe('OpenAI SDK', () => {
  it('chat.completions.runTools: the function runs and its result is answered', async () => {
    const client = scripted.openai();
    const calls = [];
    const runner = client.chat.completions.runTools({
      model: MODEL_NAME, max_tokens: 200, messages: user('Add them. [oai-runner]'),
      tools: [{
        type: 'function',
        function: {
          name: 'add', description: 'Adds two integers', parse: JSON.parse,
          parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
                        required: ['a', 'b'] },
          function: (args) => {
            calls.push(args);
            return `sum=${args.a + args.b}`;
          },
        },
      }],
    });
    assert.equal(await runner.finalContent(), 'The OpenAI sum is 12.');
    assert.deepEqual(calls, [{ a: 5, b: 7 }]);
    const completions = runner.allChatCompletions();
    assert.equal(completions.length, 2);
    assert.equal(completions[0].choices[0].finish_reason, 'tool_calls');
    assert.equal(completions[1].choices[0].finish_reason, 'stop');
  });
});

describe('server rules Claude Code and the SDKs rely on', () => {
  it('input + max_tokens over the context: 400 in Anthropic shape naming both numbers', async () => {
    const body = { model: MODEL_NAME, messages: user('Tell me a story.') };
    const n = (await postJSON(small, '/v1/messages/count_tokens', body)).json.input_tokens;
    const m = SMALL_CONTEXT - n + 1;
    const r = await postJSON(small, '/v1/messages', { ...body, max_tokens: m }, { 'anthropic-version': '2023-06-01' });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    const prefix = 'input length and `max_tokens` exceed context limit: ';
    assert.ok(r.json.error.message.startsWith(`${prefix}${n} + ${m} > ${SMALL_CONTEXT}`), r.json.error.message);
  });

  it('GET /v1/models and /v1/models/{id}: Anthropic shape with anthropic-version, else OpenAI shape', async () => {
    const anthropic = { 'anthropic-version': '2023-06-01' };
    const get = async (route, headers = {}) => {
      const r = await fetch(`${small.url}${route}`, { headers });
      const text = await r.text();
      let json = null;
      try { json = JSON.parse(text); } catch { /* not JSON */ }
      return { status: r.status, text, json };
    };
    const isAnthropicModel = (m) => {
      assert.equal(m.type, 'model', JSON.stringify(m));
      assert.equal(typeof m.display_name, 'string');
      assert.ok(!Number.isNaN(Date.parse(m.created_at)), `created_at is RFC 3339: ${m.created_at}`);
      assert.equal(m.object, undefined);
    };
    const isOpenAIModel = (m) => {
      assert.equal(m.object, 'model', JSON.stringify(m));
      assert.equal(typeof m.created, 'number');
      assert.equal(typeof m.owned_by, 'string');
      assert.equal(m.type, undefined);
    };

    const a = await get('/v1/models', anthropic);
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.data[0].id, MODEL_NAME);
    a.json.data.forEach(isAnthropicModel);
    assert.equal(a.json.has_more, false);
    assert.equal(a.json.first_id, a.json.data[0].id);
    assert.equal(a.json.last_id, a.json.data.at(-1).id);

    const o = await get('/v1/models');
    assert.equal(o.status, 200, o.text);
    assert.equal(o.json.object, 'list');
    assert.equal(o.json.data[0].id, MODEL_NAME);
    o.json.data.forEach(isOpenAIModel);

    const one = await get(`/v1/models/${MODEL_NAME}`, anthropic);
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.id, MODEL_NAME);
    isAnthropicModel(one.json);
    const oneO = await get(`/v1/models/${MODEL_NAME}`);
    assert.equal(oneO.status, 200, oneO.text);
    assert.equal(oneO.json.id, MODEL_NAME);
    isOpenAIModel(oneO.json);

    expectAnthropicError(assert, await get('/v1/models/no-such-model', anthropic), 404, 'not_found_error');
    expectOpenAIError(assert, await get('/v1/models/no-such-model'), 404);

    // The same through the clients.
    const listed = [];
    for await (const m of small.anthropic().models.list()) listed.push(m.id);
    assert.equal(listed[0], MODEL_NAME);
    assert.equal((await small.anthropic().models.retrieve(MODEL_NAME)).type, 'model');
    await assert.rejects(small.anthropic().models.retrieve('no-such-model'), (e) => e.status === 404);
    assert.equal((await small.openai().models.retrieve(MODEL_NAME)).object, 'model');
  });

  it('thinking.budget_tokens must be below max_tokens', async () => {
    const body = { model: MODEL_NAME, messages: user('x'), thinking: { type: 'enabled', budget_tokens: 1024 } };
    const r = await postJSON(scripted, '/v1/messages', { ...body, max_tokens: 1000 });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    assert.match(r.json.error.message, /max_tokens/);
    assert.match(r.json.error.message, /budget_tokens/);
    const ok = await postJSON(scripted, '/v1/messages', { ...body, max_tokens: 2000 });
    assert.equal(ok.status, 200, ok.text);
  });

  it('without --tool-call-parser / --enable-auto-tool-choice / --reasoning-parser tool calls are parsed', async () => {
    const o = await bare.openai().chat.completions.create({ model: MODEL_NAME, max_tokens: 200,
                                                           messages: user('[weather]'), tools: [WEATHER_TOOL] });
    assert.equal(o.choices[0].finish_reason, 'tool_calls', JSON.stringify(o.choices[0]));
    assert.equal(o.choices[0].message.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(o.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris', days: 2 });

    const a = await bare.anthropic().messages.create({
      model: MODEL_NAME, max_tokens: 200, messages: user('[weather]'),
      tools: [{ name: 'get_weather', description: WEATHER_TOOL.function.description,
                input_schema: WEATHER_TOOL.function.parameters }],
    });
    assert.equal(a.stop_reason, 'tool_use', JSON.stringify(a));
    const use = a.content.find((b) => b.type === 'tool_use');
    assert.deepEqual(use.input, { city: 'Paris', days: 2 });
  });

  it("Claude Code's tool loop works on a server started without parser flags", async () => {
    const sandbox = claudeSandbox();
    const run = await runClaude(bare, sandbox, 'Run the marker command. [cc-tool]',
                                ['--allowedTools', 'Bash', '--max-turns', '4', '--output-format', 'json']);
    assert.equal(okResult(run, run.json).result, FINAL_TEXT);
    assert.equal(fs.readFileSync(path.join(sandbox.cwd, 'marker.txt'), 'utf8'), `${MARKER}\n`);
  });

  // The server holds no conversation between requests: a thread is refused with the SDK's own error code, which
  // makes the tool runner resend the whole history unthreaded (the runner tests above go through it);
  // `thread: false` and `thread: null` are plain requests.
  it("the tool runner's `thread` field: refused with thread_unsupported_request, false accepted", async () => {
    const headers = { 'anthropic-version': '2023-06-01', 'anthropic-beta': 'message-threads-2026-08-12' };
    const base = { model: MODEL_NAME, max_tokens: 20, messages: user('plain') };
    const r = await postJSON(scripted, '/v1/messages', { ...base, thread: { type: 'create' } }, headers);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.details.error_code, 'thread_unsupported_request', r.text);
    assert.deepEqual(r.json.error.details.unsupported, ['thread']);
    for (const thread of [false, null]) {
      const ok = await postJSON(scripted, '/v1/messages', { ...base, thread }, headers);
      assert.equal(ok.status, 200, ok.text);
      assert.equal(textOf(ok.json), 'Hello from the script.');
    }
  });

  it('a chat request without max_tokens stops at generation_config max_new_tokens (256)', async () => {
    const r = await small.openai().chat.completions.create({ model: MODEL_NAME, messages: user('Go on forever.') });
    const finish = r.choices[0].finish_reason;
    assert.ok(finish === 'length' || finish === 'stop', finish);
    assert.ok(r.usage.completion_tokens <= 256, JSON.stringify(r.usage));
    if (finish === 'length') assert.equal(r.usage.completion_tokens, 256);
  });
});
