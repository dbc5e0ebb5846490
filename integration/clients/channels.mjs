// Drives the official Anthropic JavaScript SDK (npm `@anthropic-ai/sdk`) against models
// that Switchyard serves through a supply channel (Bedrock, Vertex). The SDK is pointed at
// the gateway only by ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, as a user would. The Go
// test (channels_clients_test.go) starts the gateway, runs this script and judges what it
// printed.
//
// Environment: SY_ANTHROPIC_MODELS, the service model ids to call, comma-separated.
//
// Output: one JSON object per line, two per model (cases "<model> messages" and
// "<model> messages stream"):
//   {case, model, models, text, events, usage, seen, error, status}
// `models` is every model id a stream's events carried, `events` the stream's event types
// in order, and `seen` everything the SDK handed back (the response headers and the
// message or every event, as JSON), for the test to search for what must not leak.

import Anthropic from '@anthropic-ai/sdk';

const models = (process.env.SY_ANTHROPIC_MODELS ?? '').split(',').filter(Boolean);
if (models.length === 0) {
  console.error('channels.mjs: SY_ANTHROPIC_MODELS is not set');
  process.exit(2);
}

// No retries: a failed call should show at once, not be hidden by the SDK's back-off.
const anthropic = new Anthropic({ maxRetries: 0, timeout: 20_000 });
const messages = [{ role: 'user', content: 'Say hello.' }];
const textOf = (content) => content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const headersOf = (response) => JSON.stringify(Object.fromEntries(response.headers.entries()));

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

for (const model of models) {
  await run(`${model} messages`, async () => {
    const { data: m, response } = await anthropic.messages
      .create({ model, max_tokens: 256, messages })
      .withResponse();
    return { model: m.model, text: textOf(m.content), usage: m.usage, seen: headersOf(response) + JSON.stringify(m) };
  });

  await run(`${model} messages stream`, async () => {
    // The raw event stream, to see every event the gateway sent, in order.
    const { data: stream, response } = await anthropic.messages
      .create({ model, max_tokens: 256, messages, stream: true })
      .withResponse();
    const seen = [headersOf(response)];
    const models = new Set();
    const events = [];
    let text = '';
    let usage = null;
    for await (const ev of stream) {
      seen.push(JSON.stringify(ev));
      events.push(ev.type);
      if (ev.type === 'message_start') {
        models.add(ev.message.model);
        usage = ev.message.usage;
      }
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') usage = { ...usage, ...ev.usage };
    }
    return { models: [...models], text, events, usage, seen: seen.join('\n') };
  });
}
