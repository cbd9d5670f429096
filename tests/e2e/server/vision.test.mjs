// Images and videos through the official clients on the tiny random model (its vision tower is tiny too): OpenAI
// image_url and video_url parts (data: URLs, file:// under --allowed-local-media-path) and Anthropic base64 image
// blocks are answered, the prompt grows by the placeholder tokens (a 56 x 56 image: 4, a 100 x 60 one: 8; a
// 2.5 s video at 1 fps: 2 temporal patches of 6, each with its timestamp), the same image or video repeats its
// answer and hits the prefix cache, and bad media are 400s naming the part.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { MODEL_NAME, REPO, expectAnthropicError, expectOpenAIError, postJSON, startServer } from './lib/harness.mjs';

const VISION = path.join(REPO, 'tests/fixtures/vision');
const IMAGES = path.join(VISION, 'images');
const VIDEOS = path.join(VISION, 'videos');
const dataUrl = (file, type = 'image/png') =>
  `data:${type};base64,${fs.readFileSync(path.join(IMAGES, file)).toString('base64')}`;
const SQUARE = dataUrl('square.png');  // 56 x 56: 2 x 2 merged patches
const WIDE = dataUrl('wide.png');      // 100 x 60 -> 112 x 56: 2 x 4
let server, openai, anthropic;

before(async () => {
  server = await startServer({ args: ['--max-model-len', '2048', '--allowed-local-media-path', VISION,
                                      '--limit-mm-per-prompt', '{"image": 2, "video": 1}'] });
  openai = server.openai();
  anthropic = server.anthropic();
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.output);
});

// The image first: the text after it is cached only with the same image before it.
const ask = (url, text = 'What is in this image?') => openai.chat.completions.create({
  model: MODEL_NAME, max_tokens: 6, temperature: 0,
  messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text }] }],
});

describe('OpenAI image_url parts', () => {
  it('a data: URL is answered; the prompt holds the image tokens', async () => {
    const square = await ask(SQUARE);
    assert.equal(square.choices[0].finish_reason, 'length');
    assert.equal(square.usage.completion_tokens, 6);
    const wide = await ask(WIDE);
    assert.equal(wide.usage.prompt_tokens - square.usage.prompt_tokens, 4, 'a 2 x 4 grid has 4 tokens more');
  });

  it('the same image gives the same greedy answer and reads the prefix cache', async () => {
    const text = 'Describe it. '.repeat(40);
    const a = await ask(SQUARE, text);
    const b = await ask(SQUARE, text);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
  });

  it('another image with the same token count is not served from the first one\'s pages', async () => {
    const text = 'Another picture. '.repeat(40);
    await ask(SQUARE, text);
    const other = await ask(dataUrl('lossless.webp', 'image/webp'), text);  // 64 x 48 -> 56 x 56: 4 tokens too
    const cached = other.usage.prompt_tokens_details?.cached_tokens ?? 0;
    // Only the pages before the image (the template's system prompt) are shared; the same image again shares
    // the pages after it too.
    const again = await ask(SQUARE, text);
    const same = again.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached + 128 <= same, `other image ${cached}, same image ${same} cached tokens`);
  });

  it('file:// URLs under --allowed-local-media-path, streaming', async () => {
    const stream = await openai.chat.completions.create({
      model: MODEL_NAME, max_tokens: 4, temperature: 0, stream: true,
      messages: [{ role: 'user', content: [
        { type: 'image_url', image_url: { url: `file://${path.join(IMAGES, 'photo.jpg')}` } },
        { type: 'text', text: 'and this?' }] }],
    });
    let text = '', finish = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'length');
    assert.equal(typeof text, 'string');
  });

  it('bad media are 400s naming the part', async () => {
    const bad = async (url) => postJSON(server, '/v1/chat/completions', {
      model: MODEL_NAME, max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'x' }] }],
    });
    for (const [url, why] of [
      ['data:image/png;base64,!!!!', /base64/],
      [`data:image/png;base64,${Buffer.from('not an image at all').toString('base64')}`, /not a JPEG, PNG or WebP/],
      [SQUARE.slice(0, 200), /PNG/],
      ['file:///etc/passwd', /outside|allowed-local-media-path/],
      ['https://example.com/cat.png', /allowed-media-domains/],
      ['ftp://example.com/cat.png', /scheme/],
    ]) {
      const r = await bad(url);
      expectOpenAIError(assert, r, 400);
      assert.match(r.json.error.message, /messages\[0\]\.content\[0\]/, r.text);
      assert.match(r.json.error.message, why, r.text);
    }
    const three = await postJSON(server, '/v1/chat/completions', {
      model: MODEL_NAME, max_tokens: 2,
      messages: [{ role: 'user', content: [1, 2, 3].map(() => ({ type: 'image_url', image_url: { url: SQUARE } })) }],
    });
    expectOpenAIError(assert, three, 400);
    assert.match(three.json.error.message, /limit-mm-per-prompt/);
    const video = await postJSON(server, '/v1/chat/completions', {
      model: MODEL_NAME, max_tokens: 2,
      messages: [{ role: 'user', content: [{ type: 'video_url', video_url: { url: SQUARE } }] }],
    });
    expectOpenAIError(assert, video, 400);
    assert.match(video.json.error.message, /image_url/, video.text);
    // The server is still fine.
    assert.equal((await ask(SQUARE)).usage.completion_tokens, 6);
  });
});

describe('OpenAI video_url parts', () => {
  // Where the server found no FFmpeg libraries (it says so at startup; the GPU machine's image has none), video
  // parts are 400s and there is nothing here to check.
  const noFfmpeg = (t) => {
    if (!/video input unavailable/.test(server.output)) return false;
    t.skip('the server has no FFmpeg libraries');
    return true;
  };
  const CLIP = `data:video/mp4;base64,${fs.readFileSync(path.join(VIDEOS, 'clip.mp4')).toString('base64')}`;
  const watch = (url, text = 'What happens in this video?') => openai.chat.completions.create({
    model: MODEL_NAME, max_tokens: 5, temperature: 0,
    messages: [{ role: 'user', content: [{ type: 'video_url', video_url: { url } }, { type: 'text', text }] }],
  });

  it('a data: URL video is answered; the prompt holds its frames and timestamps', async (t) => {
    if (noFfmpeg(t)) return;
    const text = 'What happens in this video?';
    const plain = await openai.chat.completions.create({
      model: MODEL_NAME, max_tokens: 1, messages: [{ role: 'user', content: text }] });
    const r = await watch(CLIP, text);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 5);
    // 2 temporal patches of 2 x 3 merged patches, each between the vision markers after its timestamp text.
    const grew = r.usage.prompt_tokens - plain.usage.prompt_tokens;
    assert.ok(grew >= 2 * (6 + 2) + 2 * 4 && grew <= 2 * (6 + 2) + 2 * 12, `the video added ${grew} tokens`);
  });

  it('the same video again gives the same answer from the prefix cache; file:// works too', async (t) => {
    if (noFfmpeg(t)) return;
    const text = 'Tell me about it. '.repeat(40);
    const a = await watch(CLIP, text);
    const b = await watch(`file://${path.join(VIDEOS, 'clip.mp4')}`, text);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
  });

  it('bad videos are 400s naming the part; one video per prompt here', async (t) => {
    if (noFfmpeg(t)) return;
    for (const [url, why] of [
      [`data:video/mp4;base64,${Buffer.from('not a video at all, just text').toString('base64')}`, /video/],
      [CLIP.slice(0, 120), /video|frame/],
    ]) {
      const r = await postJSON(server, '/v1/chat/completions', {
        model: MODEL_NAME, max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'video_url', video_url: { url } }] }],
      });
      expectOpenAIError(assert, r, 400);
      assert.match(r.json.error.message, /messages\[0\]\.content\[0\]/, r.text);
      assert.match(r.json.error.message, why, r.text);
    }
    const two = await postJSON(server, '/v1/chat/completions', {
      model: MODEL_NAME, max_tokens: 2,
      messages: [{ role: 'user', content: [CLIP, CLIP].map((url) => ({ type: 'video_url', video_url: { url } })) }],
    });
    expectOpenAIError(assert, two, 400);
    assert.match(two.json.error.message, /at most 1 video/);
  });
});

describe('Anthropic image blocks', () => {
  const image = (data, media_type = 'image/png') => ({ type: 'image', source: { type: 'base64', media_type, data } });
  const b64 = (file) => fs.readFileSync(path.join(IMAGES, file)).toString('base64');

  it('a base64 image block is answered; the prompt holds the image tokens', async () => {
    const msg = (file) => anthropic.messages.create({
      model: MODEL_NAME, max_tokens: 5, temperature: 0,
      messages: [{ role: 'user', content: [image(b64(file)), { type: 'text', text: 'What is this?' }] }],
    });
    // Anthropic's input_tokens leaves out what the prompt cache read or wrote.
    const total = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
    const square = await msg('square.png');
    assert.equal(square.type, 'message');
    assert.equal(square.stop_reason, 'max_tokens');
    assert.equal(square.usage.output_tokens, 5);
    const wide = await msg('wide.png');
    assert.equal(total(wide.usage) - total(square.usage), 4);
    const counted = await anthropic.messages.countTokens({
      model: MODEL_NAME, messages: [{ role: 'user', content: [image(b64('wide.png')), { type: 'text', text: 'What is this?' }] }],
    });
    assert.equal(counted.input_tokens, total(wide.usage));
  });

  it('an image inside a tool result (Claude Code reading an image file) is answered', async () => {
    const tools = [{ name: 'Read', description: 'Read a file', input_schema: { type: 'object',
      properties: { file_path: { type: 'string' } }, required: ['file_path'] } }];
    const turn = (file) => anthropic.messages.create({
      model: MODEL_NAME, max_tokens: 4, temperature: 0, tools,
      messages: [
        { role: 'user', content: 'Look at the picture.' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/p.png' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1',
                                    content: [{ type: 'text', text: 'Read image' }, image(b64(file))] }] },
      ],
    });
    const total = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
    const square = await turn('square.png');
    assert.equal(square.usage.output_tokens, 4);
    const wide = await turn('wide.png');
    assert.equal(total(wide.usage) - total(square.usage), 4);
  });

  it('a malformed image is a 400 invalid_request_error', async () => {
    const r = await postJSON(server, '/v1/messages', {
      model: MODEL_NAME, max_tokens: 5,
      messages: [{ role: 'user', content: [image(Buffer.from('GIF89a....').toString('base64'), 'image/gif')] }],
    });
    expectAnthropicError(assert, r, 400, 'invalid_request_error');
    assert.match(r.json.error.message, /not a JPEG, PNG or WebP/);
  });
});
