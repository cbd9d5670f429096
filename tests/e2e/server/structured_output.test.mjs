// Structured output end to end on the tiny random-weight model, whose text is noise: only the grammar stands
// between it and invalid output. Through the official `openai` and `@anthropic-ai/sdk` clients and raw HTTP,
// streaming and not: response_format json_schema (strict) and json_object, vLLM's structured_outputs /
// guided_* (regex, choice, EBNF grammar), forced tool choice (OpenAI required / named, Anthropic any / tool)
// over Claude Code's own tool list, and Anthropic output_config.format; schemas from Claude Code's tools, the
// JSON Schema Test Suite (tests/fixtures/json_schema_test_suite) and hand-written nested / recursive ones. Every answer that finishes is checked
// with ajv against its schema; a cut one must say finish_reason "length". Noise picks a string's closing quote
// about once in 10^4 tokens, so most requests raise it with logit_bias (the OpenAI parameter) or bound their
// strings: a bias only changes which allowed token is likely, never what the grammar allows.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Ajv2020 from 'ajv/dist/2020.js';

import { MODEL_NAME, REPO, expectAnthropicError, expectOpenAIError, postJSON, startServer } from './lib/harness.mjs';

let server, openai, anthropic;
before(async () => {
  server = await startServer({ args: ['--max-model-len', '16384', '--max-num-seqs', '64'] });
  openai = server.openai();
  anthropic = server.anthropic();
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

const QUOTE = 34;        // '"'
const MARKER = 200058;   // ]<]minimax[>[ : ends a tool-call string value
const SHORTEN = { [QUOTE]: 5, [MARKER]: 5 };
const NO_THINKING = { reasoning_effort: 'none' };
// ownProperties: a schema may name properties like 'constructor' that every JS object inherits.
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false, ownProperties: true });
const CLAUDE_CODE_TOOLS = JSON.parse(fs.readFileSync(path.join(REPO, 'tests/fixtures/claude_code/session.json')))
  .requests[0].body.tools;

function validates(schema, value, what) {
  const check = ajv.compile(schema);
  assert.ok(check(value), `${what}: ${JSON.stringify(value)} fails its schema: ${ajv.errorsText(check.errors)}`);
}

// Hand-written schemas for what the Claude Code tools do not use: recursion, anyOf, const, prefixItems,
// patterns, formats, bounded and nested arrays.
const SCHEMAS = {
  tree: { $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: -5, maximum: 5 },
                                                          kids: { type: 'array', items: { $ref: '#/$defs/node' },
                                                                  maxItems: 2 } },
                           required: ['v'], additionalProperties: false } },
          $ref: '#/$defs/node' },
  choices: { type: 'object', properties: { kind: { enum: ['cat', 'dog', 42, null] },
                                           fixed: { const: { a: [1, 'two'] } },
                                           either: { anyOf: [{ type: 'boolean' }, { type: 'string', maxLength: 3 }] } },
             required: ['kind', 'fixed', 'either'], additionalProperties: false },
  shapes: { type: 'object', properties: {
    pair: { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'string', pattern: '^[a-c]{2}$' }],
            items: false },
    when: { type: 'string', format: 'date' },
    id: { type: 'string', format: 'uuid' },
    ratio: { type: 'number', minimum: 0 },
    list: { type: 'array', items: { type: 'integer', minimum: 10, maximum: 12 }, minItems: 1, maxItems: 3 },
  }, required: ['pair', 'when', 'id', 'ratio', 'list'], additionalProperties: false },
};

async function chat(body) {
  const r = await postJSON(server, '/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'Go.' }],
                                                            ...NO_THINKING, ...body });
  assert.equal(r.status, 200, r.text);
  return r.json.choices[0];
}

describe('JSON schema (OpenAI response_format)', () => {
  it('every answer over Claude Code\'s tool schemas and hand-written ones validates (non-streaming)', async () => {
    const corpus = [...CLAUDE_CODE_TOOLS.map((t) => [t.name, t.input_schema]), ...Object.entries(SCHEMAS)];
    let finished = 0;
    await Promise.all(corpus.flatMap(([name, schema]) => [1, 2].map(async (seed) => {
      const choice = await chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } },
                                  structured_outputs: { disable_any_whitespace: true },
                                  logit_bias: SHORTEN, seed, max_tokens: 1500 });
      if (choice.finish_reason === 'length') return;
      assert.equal(choice.finish_reason, 'stop');
      validates(schema, JSON.parse(choice.message.content), `${name} seed ${seed}`);
      ++finished;
    })));
    assert.ok(finished >= corpus.length, `only ${finished} of ${2 * corpus.length} answers completed`);
  });

  it('every answer over the JSON Schema Test Suite schemas the server takes validates', async () => {
    const dir = path.join(REPO, 'tests/fixtures/json_schema_test_suite');
    const groups = fs.readdirSync(dir).filter((f) => f.endsWith('.json'))
      .flatMap((f) => JSON.parse(fs.readFileSync(path.join(dir, f))).map((g) => [`${f}: ${g.description}`, g.schema]));
    let taken = 0, finished = 0;
    for (let i = 0; i < groups.length; i += 32) {
      await Promise.all(groups.slice(i, i + 32).map(async ([name, schema]) => {
        const r = await postJSON(server, '/v1/chat/completions', {
          model: MODEL_NAME, messages: [{ role: 'user', content: 'Go.' }], ...NO_THINKING, seed: 1, max_tokens: 400,
          logit_bias: SHORTEN, structured_outputs: { json: schema, disable_any_whitespace: true } });
        if (r.status === 400) return;  // a keyword the engine refuses (named in the error)
        assert.equal(r.status, 200, `${name}: ${r.text}`);
        ++taken;
        const choice = r.json.choices[0];
        if (choice.finish_reason === 'length') return;
        validates(schema, JSON.parse(choice.message.content), name);
        ++finished;
      }));
    }
    assert.ok(taken > 90, `only ${taken} of ${groups.length} suite schemas compiled`);
    assert.ok(finished * 10 > taken * 8, `only ${finished} of ${taken} answers completed`);
  });

  it('streaming gives the same answer as non-streaming, through the openai client', async () => {
    const schema = SCHEMAS.choices;
    const body = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Go.' }], ...NO_THINKING, seed: 7,
                   max_tokens: 400, logit_bias: SHORTEN,
                   response_format: { type: 'json_schema', json_schema: { name: 'c', schema, strict: true } } };
    const whole = await openai.chat.completions.create(body);
    let text = '', finish = null;
    for await (const chunk of await openai.chat.completions.create({ ...body, stream: true })) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.equal(finish, 'stop');
    validates(schema, JSON.parse(text), 'streamed');
  });

  it('json_object gives an object, with free whitespace', async () => {
    let finished = 0;
    for (const seed of [1, 2, 3]) {
      const choice = await chat({ response_format: { type: 'json_object' }, logit_bias: { ...SHORTEN, 92: 3, 125: 3 },
                                  seed, max_tokens: 3000 });
      if (choice.finish_reason === 'length') continue;
      const value = JSON.parse(choice.message.content);
      assert.equal(typeof value, 'object');
      assert.ok(value !== null && !Array.isArray(value));
      ++finished;
    }
    assert.ok(finished >= 1, 'no json_object answer completed');
  });

  it('max_tokens cutting a structure says length', async () => {
    const choice = await chat({ response_format: { type: 'json_schema', json_schema: { name: 't', schema: SCHEMAS.tree } },
                                seed: 1, max_tokens: 3 });
    assert.equal(choice.finish_reason, 'length');
    assert.ok(choice.message.content.startsWith('{'));
  });

  it('reasoning runs first, unconstrained, then the structure', async () => {
    const choice = await chat({ reasoning_effort: undefined, chat_template_kwargs: { thinking_mode: 'enabled' },
                                thinking_token_budget: 8, seed: 3, max_tokens: 600, logit_bias: SHORTEN,
                                response_format: { type: 'json_schema', json_schema: { name: 'c', schema: SCHEMAS.choices } } });
    assert.ok(choice.message.reasoning_content.length > 0);
    assert.equal(choice.finish_reason, 'stop');
    validates(SCHEMAS.choices, JSON.parse(choice.message.content), 'after reasoning');
  });
});

describe('vLLM structured outputs: regex, choice, grammar', () => {
  it('structured_outputs and guided_* fields hold the answer to their language', async () => {
    const cases = [
      [{ structured_outputs: { regex: '[a-z]{2,5}-[0-9]{3}' } }, /^[a-z]{2,5}-[0-9]{3}$/u],
      [{ guided_regex: '(yes|no|maybe), (?:really )?sure' }, /^(yes|no|maybe), (really )?sure$/u],
      [{ structured_outputs: { choice: ['red', 'green', 'blue'] } }, /^(red|green|blue)$/u],
      [{ guided_choice: ['Paris', 'Lyon'] }, /^(Paris|Lyon)$/u],
      [{ structured_outputs: { grammar: 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9][0-9]?' } },
       /^\([1-9][0-9]?(\+[1-9][0-9]?)*\)$/u],
    ];
    let finished = 0;
    for (const [fields, re] of cases)
      for (const seed of [1, 2]) {
        const choice = await chat({ ...fields, seed, max_tokens: 60 });
        if (choice.finish_reason === 'length') continue;
        assert.equal(choice.finish_reason, 'stop');
        assert.match(choice.message.content, re, JSON.stringify(fields));
        ++finished;
      }
    assert.ok(finished >= 8, `only ${finished} of 10 answers completed`);
    const completion = await postJSON(server, '/v1/completions', { model: MODEL_NAME, prompt: 'x', max_tokens: 40,
                                                                   guided_choice: ['alpha', 'beta'], seed: 4 });
    assert.equal(completion.status, 200, completion.text);
    assert.match(completion.json.choices[0].text, /^(alpha|beta)$/u);
  });
});

describe('forced tool choice', () => {
  const openaiTools = CLAUDE_CODE_TOOLS.map((t) => ({ type: 'function',
                                                      function: { name: t.name, description: t.description, parameters: t.input_schema } }));
  const schemaOf = Object.fromEntries(CLAUDE_CODE_TOOLS.map((t) => [t.name, t.input_schema]));

  it('OpenAI tool_choice required and named always yield parsed calls whose arguments validate', async () => {
    const runs = [];
    for (const seed of [1, 2, 3, 4]) {
      runs.push([seed, 'required']);
      runs.push([seed, { type: 'function', function: { name: ['Read', 'Edit', 'Bash', 'ListAgents'][seed - 1] } }]);
    }
    let calls = 0;
    await Promise.all(runs.map(async ([seed, tool_choice]) => {
      const choice = await chat({ tools: openaiTools, tool_choice, seed, max_tokens: 2500, logit_bias: SHORTEN,
                                  parallel_tool_calls: false });
      if (choice.finish_reason === 'length') return;
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
      assert.equal(choice.message.tool_calls.length, 1);
      for (const call of choice.message.tool_calls) {
        if (typeof tool_choice === 'object') assert.equal(call.function.name, tool_choice.function.name);
        validates(schemaOf[call.function.name], JSON.parse(call.function.arguments), `${call.function.name} seed ${seed}`);
        ++calls;
      }
    }));
    assert.ok(calls >= 6, `only ${calls} of 8 forced calls completed`);
  });

  it('streams the same calls as it answers whole', async () => {
    const tools = [{ type: 'function', function: { name: 'pick', parameters: SCHEMAS.choices } }];
    const body = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Go.' }], ...NO_THINKING, tools,
                   tool_choice: 'required', seed: 5, max_tokens: 600, logit_bias: SHORTEN };
    const whole = (await openai.chat.completions.create(body)).choices[0];
    const args = {};
    for await (const chunk of await openai.chat.completions.create({ ...body, stream: true }))
      for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) args[d.index] = (args[d.index] ?? '') + (d.function?.arguments ?? '');
    assert.equal(whole.finish_reason, 'tool_calls');
    assert.deepEqual(Object.values(args).map((a) => JSON.parse(a)), whole.message.tool_calls.map((c) => JSON.parse(c.function.arguments)));
    for (const a of Object.values(args)) validates(SCHEMAS.choices, JSON.parse(a), 'streamed call');
  });

  const BOOKING = { name: 'book', description: 'Book a table',
                    input_schema: { type: 'object', properties: {
                      city: { type: 'string', maxLength: 8 }, people: { type: 'integer', minimum: 1, maximum: 12 },
                      when: { enum: ['lunch', 'dinner'] }, vip: { type: 'boolean' },
                      notes: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 2 } },
                    required: ['city', 'people', 'when'] } };
  const WEATHER = { name: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 6 } },
                                                      required: ['city'] } };

  it('Anthropic tool_choice any / tool always yield tool_use blocks whose input validates', async () => {
    let finished = 0;
    for (const seed of [1, 2, 3]) {
      for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'weather' }]) {
        const msg = await anthropic.messages.create({ model: MODEL_NAME, max_tokens: 800, tools: [BOOKING, WEATHER],
                                                      tool_choice, thinking: { type: 'disabled' }, temperature: 1,
                                                      messages: [{ role: 'user', content: 'Go.' }] });
        if (msg.stop_reason === 'max_tokens') continue;
        assert.equal(msg.stop_reason, 'tool_use', JSON.stringify(msg.content));
        const uses = msg.content.filter((b) => b.type === 'tool_use');
        assert.ok(uses.length >= 1);
        for (const u of uses) {
          if (tool_choice.type === 'tool') assert.equal(u.name, 'weather');
          validates(u.name === 'book' ? BOOKING.input_schema : WEATHER.input_schema, u.input, `${u.name}`);
        }
        ++finished;
      }
    }
    assert.ok(finished >= 4, `only ${finished} of 6 forced tool uses completed`);
  });

  it('auto tool choice with a strict tool: prose, then calls whose arguments follow the schema', async () => {
    const tools = [{ type: 'function', function: { name: 'book', strict: true, parameters: BOOKING.input_schema } },
                   { type: 'function', function: { name: 'free', parameters: { type: 'object' } } }];
    let calls = 0;
    for (const seed of [1, 2, 3, 4]) {
      const choice = await chat({ tools, seed, max_tokens: 600, logit_bias: { [MARKER]: 8 } });
      if (choice.finish_reason === 'length') continue;
      for (const c of choice.message.tool_calls ?? []) {
        if (c.function.name === 'book') validates(BOOKING.input_schema, JSON.parse(c.function.arguments), 'strict call');
        ++calls;
      }
    }
    assert.ok(calls >= 2, `only ${calls} calls`);
  });

  it('Anthropic output_config.format holds the text to the schema, streaming too', async () => {
    const schema = BOOKING.input_schema;
    const body = { model: MODEL_NAME, max_tokens: 800, thinking: { type: 'disabled' },
                   messages: [{ role: 'user', content: 'Go.' }], output_config: { format: { type: 'json_schema', schema } } };
    const msg = await anthropic.messages.create(body);
    assert.equal(msg.stop_reason, 'end_turn');
    validates(schema, JSON.parse(msg.content[0].text), 'output_config');
    let text = '';
    for await (const e of await anthropic.messages.create({ ...body, stream: true }))
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
    validates(schema, JSON.parse(text), 'output_config streamed');
  });
});

describe('bad structured-output requests are a 400 naming the field', () => {
  const bad = async (body, param) => expectOpenAIError(assert, await postJSON(server, '/v1/chat/completions',
    { model: MODEL_NAME, messages: [{ role: 'user', content: 'x' }], ...body }), 400, param);
  it('unsupported keywords, bad patterns and grammars, conflicting fields', async () => {
    await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } } },
              'response_format');
    await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }, 'response_format.json_schema.schema');
    await bad({ structured_outputs: { regex: '(?=look)ahead' } }, 'structured_outputs');
    await bad({ guided_grammar: 'root ::= missing' }, 'guided_grammar');
    await bad({ guided_choice: [] }, 'guided_choice');
    await bad({ guided_regex: 'a', guided_choice: ['b'] }, 'guided_choice');
    await bad({ structured_outputs: { json_schema_typo: {} } }, 'structured_outputs.json_schema_typo');
    await bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], tool_choice: 'required',
                response_format: { type: 'json_object' } }, 'tool_choice');
    const r = await postJSON(server, '/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { minimum: 'x', type: 'integer' } } } } } });
    assert.equal(r.status, 400, r.text);
    const m = await postJSON(server, '/v1/messages', { model: MODEL_NAME, max_tokens: 10, messages: [{ role: 'user', content: 'x' }],
                                                       output_config: { format: { type: 'json_schema', schema: { type: 'string', format: 'color' } } } });
    expectAnthropicError(assert, m, 400, 'invalid_request_error');
    assert.match(m.json.error.message, /format/);
    // The server is fine afterwards.
    const ok = await chat({ guided_choice: ['ok'], max_tokens: 5 });
    assert.equal(ok.message.content, 'ok');
  });
});
