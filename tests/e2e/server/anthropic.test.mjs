// The Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) through the official
// @anthropic-ai/sdk with baseURL = the server root: thinking / text / tool_use blocks from scripted model
// text, the streaming event sequence, tool_use -> tool_result across turns, thinking.type enabled / disabled /
// adaptive, stop sequences and max_tokens, x-api-key and Bearer auth, and count_tokens.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { MODEL_NAME, expectAnthropicError, postJSON, startServer } from './lib/harness.mjs';
import { SCRIPT } from './lib/script.mjs';

let server, client;

before(async () => {
  // A host tier too (--kv-offloading-size): the scripted backend keeps its pages' tokens there.
  server = await startServer({ script: SCRIPT, args: ['--max-model-len', '4096', '--kv-offloading-size', '0.01'] });
  client = server.anthropic();
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

const WEATHER = {
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
                  required: ['city'] },
};
const user = (text) => [{ role: 'user', content: text }];

// The raw event sequence of a streamed request, checked for well-formedness; returns {events, message}
// with the message rebuilt from the events.
async function streamed(body) {
  const stream = await client.messages.create({ model: MODEL_NAME, max_tokens: 200, ...body, stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  assert.equal(events[0].type, 'message_start');
  assert.equal(events[0].message.role, 'assistant');
  assert.deepEqual(events[0].message.content, []);
  assert.ok(events[0].message.usage.input_tokens > 0);
  assert.equal(events.at(-1).type, 'message_stop');
  assert.equal(events.at(-2).type, 'message_delta');
  const blocks = [];
  let open = -1;
  for (const e of events.slice(1, -2)) {
    if (e.type === 'content_block_start') {
      assert.equal(open, -1, 'blocks do not nest');
      assert.equal(e.index, blocks.length, 'block indexes count up from 0');
      open = e.index;
      blocks.push({ ...e.content_block, _json: '' });
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, open);
      const b = blocks[open];
      if (e.delta.type === 'text_delta') b.text += e.delta.text;
      else if (e.delta.type === 'thinking_delta') b.thinking += e.delta.thinking;
      else if (e.delta.type === 'signature_delta') b.signature = e.delta.signature;
      else if (e.delta.type === 'input_json_delta') b._json += e.delta.partial_json;
      else assert.fail(`unknown delta ${e.delta.type}`);
    } else if (e.type === 'content_block_stop') {
      assert.equal(e.index, open);
      open = -1;
    } else if (e.type !== 'ping') {
      assert.fail(`unexpected event ${e.type}`);
    }
  }
  assert.equal(open, -1, 'every block is closed before message_delta');
  for (const b of blocks) {
    if (b.type === 'tool_use') b.input = JSON.parse(b._json || '{}');
    if (b.type === 'thinking') assert.ok(b.signature, 'a thinking block carries a signature');
    delete b._json;
  }
  const delta = events.at(-2);
  return { events, content: blocks, stop_reason: delta.delta.stop_reason, stop_sequence: delta.delta.stop_sequence,
           usage: delta.usage };
}

// Content blocks without the random parts (signatures, tool ids).
const shape = (content) => content.map((b) => {
  const { signature, id, ...rest } = b;
  return rest;
});

async function both(body) {
  const full = await client.messages.create({ model: MODEL_NAME, max_tokens: 200, ...body });
  const s = await streamed(body);
  assert.deepEqual(shape(s.content), shape(full.content), 'streamed blocks equal non-streamed blocks');
  assert.equal(s.stop_reason, full.stop_reason);
  assert.equal(s.stop_sequence, full.stop_sequence);
  assert.equal(s.usage.output_tokens, full.usage.output_tokens);
  return { full, s };
}

describe('messages', () => {
  it('thinking enabled: a thinking block then a text block, end_turn', async () => {
    const { full, s } = await both({ messages: user('2+2? [enabled]'), max_tokens: 2000,
                                     thinking: { type: 'enabled', budget_tokens: 1024 } });
    assert.match(full.id, /^msg_/);
    assert.equal(full.type, 'message');
    assert.equal(full.role, 'assistant');
    assert.equal(full.model, MODEL_NAME);
    assert.deepEqual(shape(full.content), [
      { type: 'thinking', thinking: 'The user wants 2+2. That is 4.' },
      { type: 'text', text: '2 + 2 = 4.' },
    ]);
    assert.ok(full.content[0].signature.length > 0);
    assert.equal(full.stop_reason, 'end_turn');
    assert.equal(full.stop_sequence, null);
    assert.ok(full.usage.input_tokens > 0 && full.usage.output_tokens > 0);
    const types = s.events.map((e) => e.type + (e.delta?.type ? `:${e.delta.type}` : ''));
    assert.deepEqual(types.filter((t, i) => t !== types[i - 1]), [
      'message_start', 'content_block_start', 'content_block_delta:thinking_delta',
      'content_block_delta:signature_delta', 'content_block_stop', 'content_block_start',
      'content_block_delta:text_delta', 'content_block_stop', 'message_delta', 'message_stop',
    ]);
  });

  it('thinking.budget_tokens closes the thinking block when spent, and must stay below max_tokens', async () => {
    const { full } = await both({ messages: user('2+2? [enabled]'), max_tokens: 50,
                                  thinking: { type: 'enabled', budget_tokens: 3 } });
    const whole = 'The user wants 2+2. That is 4.';
    assert.equal(full.content[0].type, 'thinking');
    const cut = full.content[0].thinking;
    assert.ok(cut.length > 0 && cut.length < whole.length && whole.startsWith(cut),
              `the thinking was cut after 3 tokens: ${JSON.stringify(cut)}`);
    assert.equal(full.content[1].type, 'text', 'the answer goes on after the forced </mm:think>');
    const r = await postJSON(server, '/v1/messages', { model: MODEL_NAME, max_tokens: 1024, messages: user('x'),
                                                        thinking: { type: 'enabled', budget_tokens: 1024 } });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    assert.match(r.json.error.message, /`max_tokens` must be greater than `thinking.budget_tokens`/);
  });

  it('thinking disabled: text only', async () => {
    const { full } = await both({ messages: user('Capital? [disabled]'), thinking: { type: 'disabled' } });
    assert.deepEqual(shape(full.content), [{ type: 'text', text: 'Paris is the capital of France.' }]);
  });

  it('thinking adaptive: the model decides', async () => {
    const a = await both({ messages: user('[adaptive-think]'), thinking: { type: 'adaptive' } });
    assert.deepEqual(shape(a.full.content), [{ type: 'thinking', thinking: 'Short thought.' },
                                             { type: 'text', text: 'Adaptive answer.' }]);
    const b = await both({ messages: user('[adaptive-plain]'), thinking: { type: 'adaptive' } });
    assert.deepEqual(shape(b.full.content), [{ type: 'text', text: 'Plain adaptive answer.' }]);
  });

  it('thinking.type is passed to the template as thinking_mode', async () => {
    const t = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x'),
                                                  thinking: { type: 'enabled', budget_tokens: 1024 } });
    const d = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x'),
                                                  thinking: { type: 'disabled' } });
    const tok = await postJSON(server, '/tokenize', { messages: user('x'),
                                                      chat_template_kwargs: { thinking_mode: 'enabled' } });
    assert.equal(t.input_tokens, tok.json.count);
    assert.notEqual(t.input_tokens, d.input_tokens);
  });

  it('system prompt as a string and as text blocks', async () => {
    const a = await client.messages.countTokens({ model: MODEL_NAME, system: 'Be brief.', messages: user('x') });
    const b = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x'),
                                                  system: [{ type: 'text', text: 'Be brief.' }] });
    const none = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x') });
    assert.equal(a.input_tokens, b.input_tokens);
    assert.notEqual(a.input_tokens, none.input_tokens);
  });

  it('stop_sequences and max_tokens', async () => {
    const { full } = await both({ messages: user('[stop]'), stop_sequences: ['gamma'] });
    assert.deepEqual(shape(full.content), [{ type: 'text', text: 'Alpha beta ' }]);
    assert.equal(full.stop_reason, 'stop_sequence');
    assert.equal(full.stop_sequence, 'gamma');
    const cut = await both({ messages: user('[stop]'), max_tokens: 2 });
    assert.equal(cut.full.stop_reason, 'max_tokens');
    assert.equal(cut.full.usage.output_tokens, 2);
  });

  it('the query string Claude Code appends (?beta=true) is tolerated', async () => {
    const r = await postJSON(server, '/v1/messages?beta=true', { model: MODEL_NAME, max_tokens: 20,
                                                                 messages: user('plain') },
                             { 'anthropic-version': '2023-06-01' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.content[0].text, 'Hello from the script.');
  });
});

describe('tools', () => {
  it('tool_use block, stop_reason tool_use, then tool_result answered in the next turn', async () => {
    const body = { messages: user('Weather? [weather]'), tools: [WEATHER] };
    const { full, s } = await both(body);
    assert.equal(full.stop_reason, 'tool_use');
    assert.deepEqual(shape(full.content), [
      { type: 'thinking', thinking: 'I need the weather tool.' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', name: 'get_weather', input: { city: 'Paris', days: 3 } },
    ]);
    const use = full.content[2];
    assert.ok(use.id.length > 0);
    assert.ok(s.events.some((e) => e.type === 'content_block_start' && e.content_block.type === 'tool_use' &&
                                   e.content_block.name === 'get_weather'));
    assert.ok(s.events.some((e) => e.delta?.type === 'input_json_delta'));

    const next = {
      tools: [WEATHER],
      messages: [
        ...user('Weather? [weather]'),
        { role: 'assistant', content: full.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18 degrees and sunny' }] },
      ],
    };
    const second = await both(next);
    assert.deepEqual(shape(second.full.content), [{ type: 'text', text: 'It is 18 degrees and sunny in Paris.' }]);
    assert.equal(second.full.stop_reason, 'end_turn');
    // tool_result content given as text blocks renders the same.
    const blocks = structuredClone(next);
    blocks.messages[2].content[0].content = [{ type: 'text', text: '18 degrees and sunny' }];
    const c1 = await client.messages.countTokens({ model: MODEL_NAME, ...next });
    const c2 = await client.messages.countTokens({ model: MODEL_NAME, ...blocks });
    assert.equal(c1.input_tokens, c2.input_tokens);
    // usage.input_tokens leaves out what was read from the prefix cache (the first turn's pages).
    const u = second.full.usage;
    assert.equal(c1.input_tokens, u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens);
  });

  it('tool_choice any / tool / none', async () => {
    // A forced choice admits only the markup after the reasoning (its grammar): the script without prose.
    for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }, { type: 'auto' }]) {
      const tag = tool_choice.type === 'auto' ? '[weather]' : '[weather-call]';
      const r = await client.messages.create({ model: MODEL_NAME, max_tokens: 200, messages: user(tag),
                                               tools: [WEATHER], tool_choice });
      assert.equal(r.stop_reason, 'tool_use', JSON.stringify(tool_choice));
    }
    const none = await client.messages.create({ model: MODEL_NAME, max_tokens: 200, messages: user('[weather]'),
                                                tools: [WEATHER], tool_choice: { type: 'none' } });
    assert.equal(none.stop_reason, 'end_turn');
    assert.ok(!none.content.some((b) => b.type === 'tool_use'));
  });

  it('a resent conversation reads its prefix from the cache: cache_read_input_tokens', async () => {
    const messages = user('resend me '.repeat(300));
    const first = await client.messages.create({ model: MODEL_NAME, max_tokens: 20, messages });
    assert.equal(first.usage.cache_creation_input_tokens, 0);
    const again = await client.messages.create({ model: MODEL_NAME, max_tokens: 20, messages });
    // The first may already share the template's head with earlier requests; the resend shares its body too.
    assert.ok(again.usage.cache_read_input_tokens > first.usage.cache_read_input_tokens + 128,
              JSON.stringify([first.usage, again.usage]));
    assert.equal(again.usage.input_tokens + again.usage.cache_read_input_tokens,
                 first.usage.input_tokens + first.usage.cache_read_input_tokens);
    assert.deepEqual(again.content, first.content);
  });

  it('cache_control keeps the marked prompt and reports it: cache_creation_input_tokens, then reads', async () => {
    const body = {
      model: MODEL_NAME, max_tokens: 20,
      system: [{ type: 'text', text: 'keep me '.repeat(200), cache_control: { type: 'ephemeral', ttl: '1h' } }],
      messages: user('a question after a long, marked system prompt'),
    };
    const count = await client.messages.countTokens({ model: MODEL_NAME, system: body.system,
                                                      messages: body.messages });
    const first = await client.messages.create(body);
    const u1 = first.usage;
    assert.ok(u1.cache_creation_input_tokens >= 256, JSON.stringify(u1));
    assert.equal(u1.input_tokens + u1.cache_read_input_tokens + u1.cache_creation_input_tokens, count.input_tokens);
    const again = await client.messages.create(body);
    const u2 = again.usage;
    assert.equal(u2.cache_creation_input_tokens, 0, JSON.stringify(u2));
    assert.ok(u2.cache_read_input_tokens >= u1.cache_read_input_tokens + u1.cache_creation_input_tokens,
              JSON.stringify([u1, u2]));
    assert.equal(u2.input_tokens + u2.cache_read_input_tokens, count.input_tokens);
    for (const cache_control of [{ type: 'forever' }, { type: 'ephemeral', ttl: '2h' }, 'ephemeral']) {
      const r = await postJSON(server, '/v1/messages', {
        model: MODEL_NAME, max_tokens: 20, messages: [{ role: 'user', content: [{ type: 'text', text: 'x', cache_control }] }],
      });
      expectAnthropicError(assert, r, 400, 'invalid_request_error');
      assert.match(r.json.error.message, /cache_control/);
    }
  });

  it('count_tokens counts the tools', async () => {
    const without = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x') });
    const withTools = await client.messages.countTokens({ model: MODEL_NAME, messages: user('x'), tools: [WEATHER] });
    assert.ok(withTools.input_tokens > without.input_tokens + 20);
  });
});

describe('errors in the Anthropic shape', () => {
  it('bad requests answer {"type":"error","error":{...}} and the SDK raises', async () => {
    const r = await postJSON(server, '/v1/messages', { model: MODEL_NAME, messages: user('x') });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    assert.match(r.json.error.message, /max_tokens/);
    await assert.rejects(client.messages.create({ model: MODEL_NAME, max_tokens: 10, messages: [] }),
                         (e) => e.status === 400 && e.error?.type === 'error');
    await assert.rejects(client.messages.create({ model: 'nope', max_tokens: 10, messages: user('x') }),
                         (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
  });
});
