// Drives the official JavaScript SDKs (npm `openai` and `@anthropic-ai/sdk`) against
// Switchyard, configured the way a user would: only the SDKs' own environment variables
// (OPENAI_BASE_URL + OPENAI_API_KEY, ANTHROPIC_BASE_URL + ANTHROPIC_API_KEY) point them at
// the gateway. The Go test (sdk_clients_test.go) starts the gateway, runs this script and
// judges what it printed.
//
// Output: one JSON object per line, one per call:
//   {case, model, models, text, thinking, signature, usage, ids, error, status}
// `model` is the model id the SDK handed back (for streams, every distinct value seen, in
// `models`); `text` is the assembled answer. A failed call prints `error` and `status`
// instead and the script goes on, so one broken operation does not hide the others.
//
// Environment: SY_OPENAI_MODEL and SY_ANTHROPIC_MODEL are the service model ids to call.

import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const openaiModel = need('SY_OPENAI_MODEL');
const anthropicModel = need('SY_ANTHROPIC_MODEL');

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`sdks.mjs: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

// No retries: the gateway must answer right the first time, and a failure should show
// at once rather than after the SDKs' back-off.
const openai = new OpenAI({ maxRetries: 0, timeout: 20_000 });
const anthropic = new Anthropic({ maxRetries: 0, timeout: 20_000 });

const prompt = 'Say hello.';

async function run(name, fn) {
  try {
    const out = await fn();
    process.stdout.write(JSON.stringify({ case: name, ...out }) + '\n');
  } catch (err) {
    process.stdout.write(
      JSON.stringify({ case: name, error: String(err?.message ?? err), status: err?.status ?? null }) + '\n',
    );
  }
}

// ---- OpenAI: chat completions ----------------------------------------------------------

await run('openai chat', async () => {
  const r = await openai.chat.completions.create({
    model: openaiModel,
    messages: [{ role: 'user', content: prompt }],
    reasoning_effort: 'low',
  });
  return { model: r.model, text: r.choices[0]?.message?.content ?? '', usage: r.usage };
});

await run('openai chat stream', async () => {
  const stream = await openai.chat.completions.create({
    model: openaiModel,
    messages: [{ role: 'user', content: prompt }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const models = new Set();
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    models.add(chunk.model);
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  return { models: [...models], text, usage };
});

// ---- OpenAI: responses ---------------------------------------------------------------

await run('openai responses', async () => {
  const r = await openai.responses.create({
    model: openaiModel,
    input: prompt,
    reasoning: { effort: 'low' },
  });
  return { model: r.model, text: r.output_text, usage: r.usage };
});

await run('openai responses stream', async () => {
  const stream = await openai.responses.create({ model: openaiModel, input: prompt, stream: true });
  const models = new Set();
  let text = '';
  let usage = null;
  let completed = false;
  for await (const ev of stream) {
    if (ev.response?.model) models.add(ev.response.model);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') {
      completed = true;
      usage = ev.response.usage;
    }
  }
  if (!completed) throw new Error('the stream ended without response.completed');
  return { models: [...models], text, usage };
});

// ---- OpenAI: models -----------------------------------------------------------------

await run('openai models', async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  return { ids };
});

// ---- Anthropic: messages -------------------------------------------------------------

const textOf = (content) => content.filter((b) => b.type === 'text').map((b) => b.text).join('');

await run('anthropic messages', async () => {
  const m = await anthropic.messages.create({
    model: anthropicModel,
    max_tokens: 256,
    messages: [{ role: 'user', content: prompt }],
  });
  return { model: m.model, text: textOf(m.content), usage: m.usage };
});

await run('anthropic messages stream', async () => {
  // messages.stream() is the helper most code uses; it accumulates the events itself.
  const stream = anthropic.messages.stream({
    model: anthropicModel,
    max_tokens: 256,
    messages: [{ role: 'user', content: prompt }],
  });
  const models = new Set();
  for await (const ev of stream) {
    if (ev.type === 'message_start') models.add(ev.message.model);
  }
  const m = await stream.finalMessage();
  models.add(m.model);
  return { models: [...models], text: textOf(m.content), usage: m.usage };
});

await run('anthropic messages thinking', async () => {
  const m = await anthropic.messages.create({
    model: anthropicModel,
    max_tokens: 2048,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: prompt }],
  });
  const thinking = m.content.filter((b) => b.type === 'thinking');
  return {
    model: m.model,
    text: textOf(m.content),
    thinking: thinking.map((b) => b.thinking).join(''),
    signature: thinking.map((b) => b.signature).join(''),
    usage: m.usage,
  };
});

await run('anthropic messages thinking stream', async () => {
  const stream = await anthropic.messages.create({
    model: anthropicModel,
    max_tokens: 2048,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: prompt }],
    stream: true,
  });
  const models = new Set();
  let text = '';
  let thinking = '';
  let signature = '';
  let usage = null;
  let stopped = false;
  for await (const ev of stream) {
    switch (ev.type) {
      case 'message_start':
        models.add(ev.message.model);
        usage = ev.message.usage;
        break;
      case 'content_block_delta':
        if (ev.delta.type === 'text_delta') text += ev.delta.text;
        if (ev.delta.type === 'thinking_delta') thinking += ev.delta.thinking;
        if (ev.delta.type === 'signature_delta') signature += ev.delta.signature;
        break;
      case 'message_delta':
        usage = { ...usage, ...ev.usage };
        break;
      case 'message_stop':
        stopped = true;
        break;
    }
  }
  if (!stopped) throw new Error('the stream ended without message_stop');
  return { models: [...models], text, thinking, signature, usage };
});

await run('anthropic count_tokens', async () => {
  const r = await anthropic.messages.countTokens({
    model: anthropicModel,
    messages: [{ role: 'user', content: prompt }],
  });
  return { usage: r };
});

await run('anthropic models', async () => {
  const ids = [];
  for await (const m of anthropic.models.list()) ids.push(m.id);
  return { ids };
});
