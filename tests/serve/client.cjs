// tests/serve/client.cjs — drives `nearattn serve` with the official openai
// npm package (installed by scripts/setup.sh into $NA_NODE_DIR, outside the
// sources). Usage: node client.cjs SCENARIO BASE_URL [ARGS...]; prints
// "OK ..." lines and exits 0, or prints the reason and exits 1.
//   completion BASE                    one completion: text, usage, finish_reason
//   cached BASE                        one long prompt sent twice: the second's
//                                      usage.prompt_tokens_details.cached_tokens
//                                      says its prefix came from the prefix cache
//                                      (at least one KV block), the texts equal
//   streams BASE JOBS.json OUT.json    concurrent streamed completions (one per
//                                      job {prompt, seed, temperature, top_p,
//                                      max_tokens}); their texts to OUT.json
//   chat BASE                          a streamed chat completion with usage
//   chat400 BASE                       a chat request refused with 400 (no template)
//   chatids BASE IDS                   a chat (Llama-3 template: system + user),
//                                      greedy, plain and streamed, against a
//                                      completion of the token ids in file IDS
//                                      (the rendering tokenized by `nearattn
//                                      tokenize --special`): the same prompt
//                                      token count and the same text
//   cancel BASE MARK                   a long stream aborted after 5 chunks; MARK is
//                                      created after the 5th chunk, the client
//                                      waits for MARK.go before aborting
//   key BASE KEY                       the right key works, a wrong one gets 401
//   stall BASE MARK                    a raw connection asks for a long stream and never
//                                      reads it; MARK is created once it is sent
//   ctxlimit BASE CTX                  a completion and a stream whose prompt + max_tokens
//                                      pass the model context of CTX tokens: 400
//                                      context_length_exceeded naming CTX; max_tokens
//                                      that fits is served
//   unavailable BASE                   no storage node is alive: a completion and a
//                                      stream get 503 storage_unavailable (not 500)
'use strict';
const fs = require('fs');
const path = require('path');

const nodeDir = process.env.NA_NODE_DIR;
if (!nodeDir) {
  console.error('FAIL: NA_NODE_DIR is not set (scripts/setup.sh installs the openai package)');
  process.exit(1);
}
const OpenAI = require(path.join(nodeDir, 'node_modules', 'openai'));

function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exit(1);
}

function client(base, key) {
  return new OpenAI({ baseURL: base + '/v1', apiKey: key || 'none', maxRetries: 0,
                      timeout: 60000 });
}

async function completion(base) {
  const c = client(base);
  const r = await c.completions.create({ model: 'm', prompt: 'Once upon a time',
                                         max_tokens: 12, temperature: 0, seed: 1 });
  if (r.object !== 'text_completion' || r.choices.length !== 1) fail('bad object ' + JSON.stringify(r));
  if (r.choices[0].finish_reason !== 'length') fail('finish_reason ' + r.choices[0].finish_reason);
  if (!r.usage || r.usage.completion_tokens !== 12 || r.usage.prompt_tokens < 2 ||
      r.usage.total_tokens !== r.usage.prompt_tokens + 12) fail('usage ' + JSON.stringify(r.usage));
  if (r.choices[0].text.length === 0) fail('empty text');
  console.log('OK completion ' + JSON.stringify(r.choices[0].text));
}

async function streams(base, jobsFile, outFile) {
  const jobs = JSON.parse(fs.readFileSync(jobsFile, 'utf8'));
  const c = client(base);
  const texts = await Promise.all(jobs.map(async (j) => {
    const s = await c.completions.create({ model: 'm', prompt: j.prompt, seed: j.seed,
      temperature: j.temperature, top_p: j.top_p, max_tokens: j.max_tokens, stream: true,
      stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null;
    for await (const ch of s) {
      if (ch.usage) usage = ch.usage;
      if (ch.choices.length > 0) {
        text += ch.choices[0].text;
        if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
      }
    }
    if (!finish) fail('a stream ended without finish_reason');
    if (!usage || usage.completion_tokens < 1) fail('a stream without usage');
    return text;
  }));
  fs.writeFileSync(outFile, JSON.stringify(texts));
  console.log('OK streams ' + texts.length);
}

async function chat(base) {
  const c = client(base);
  const s = await c.chat.completions.create({ model: 'm', stream: true, max_tokens: 8,
    temperature: 0.7, seed: 3, stream_options: { include_usage: true },
    messages: [{ role: 'system', content: 'You are brief.' }, { role: 'user', content: 'Hello!' }] });
  let role = null, text = '', finish = null, usage = null, n = 0;
  for await (const ch of s) {
    n++;
    if (ch.object !== 'chat.completion.chunk') fail('object ' + ch.object);
    if (ch.usage) usage = ch.usage;
    if (ch.choices.length > 0) {
      const d = ch.choices[0].delta;
      if (d.role) role = d.role;
      if (d.content) text += d.content;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
  }
  if (role !== 'assistant') fail('no assistant role');
  if (finish !== 'length' && finish !== 'stop') fail('finish ' + finish);
  if (!usage || usage.prompt_tokens < 10) fail('usage ' + JSON.stringify(usage));
  const r = await c.chat.completions.create({ model: 'm', max_tokens: 4, temperature: 0,
    messages: [{ role: 'user', content: 'Hi' }] });
  if (r.object !== 'chat.completion' || r.choices[0].message.role !== 'assistant') fail('chat object');
  console.log('OK chat ' + n + ' chunks ' + JSON.stringify(text));
}

async function chatids(base, idsFile) {
  const c = client(base);
  const ids = fs.readFileSync(idsFile, 'utf8').trim().split(/\s+/).map(Number);
  const messages = [{ role: 'system', content: 'You are brief.' },
                    { role: 'user', content: 'Hello! How are you today?' }];
  const r = await c.chat.completions.create({ model: 'm', max_tokens: 8, temperature: 0, messages });
  const p = await c.completions.create({ model: 'm', max_tokens: 8, temperature: 0, prompt: ids });
  const s = await c.chat.completions.create({ model: 'm', max_tokens: 8, temperature: 0, messages,
    stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    if (ch.choices.length > 0 && ch.choices[0].delta.content) text += ch.choices[0].delta.content;
  }
  const chatText = r.choices[0].message.content;
  if (r.usage.prompt_tokens !== ids.length || p.usage.prompt_tokens !== ids.length ||
      !usage || usage.prompt_tokens !== ids.length)
    fail('prompt tokens: chat ' + r.usage.prompt_tokens + ', stream ' + (usage && usage.prompt_tokens) +
         ', completion of the ids ' + p.usage.prompt_tokens + ', expected ' + ids.length);
  if (r.usage.completion_tokens < 1) fail('no tokens generated: ' + JSON.stringify(r.usage));
  if (chatText !== p.choices[0].text || text !== chatText)
    fail('texts differ: chat ' + JSON.stringify(chatText) + ', stream ' + JSON.stringify(text) +
         ', completion of the ids ' + JSON.stringify(p.choices[0].text));
  console.log('OK chatids ' + ids.length + ' prompt tokens, ' + r.usage.completion_tokens +
              ' generated ' + JSON.stringify(chatText));
}

async function chat400(base) {
  try {
    await client(base).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] });
  } catch (e) {
    if (e.status === 400 && /chat template/.test(e.message)) {
      console.log('OK chat400 ' + e.message);
      return;
    }
    fail('unexpected error ' + e.status + ' ' + e.message);
  }
  fail('a chat request without a template was served');
}

async function cancel(base, mark) {
  const ac = new AbortController();
  const s = await client(base).completions.create({ model: 'm', prompt: 'The', stream: true,
    max_tokens: 4000, temperature: 0 }, { signal: ac.signal });
  let n = 0, aborted = false;
  try {
    for await (const ch of s) {
      void ch;
      if (++n === 5) {
        fs.writeFileSync(mark, 'streaming\n');
        while (!fs.existsSync(mark + '.go')) await new Promise((r) => setTimeout(r, 20));
        ac.abort();
        aborted = true;
      }
    }
  } catch (e) {
    if (!aborted) fail('stream failed early: ' + e.message);
  }
  // the package ends the iteration quietly (or throws) once aborted
  if (!aborted) fail('the stream ended before it was aborted (' + n + ' chunks)');
  console.log('OK cancel after ' + n + ' chunks');
}

async function key(base, k) {
  const r = await client(base, k).completions.create({ model: 'm', prompt: 'A', max_tokens: 2 });
  if (r.usage.completion_tokens < 1) fail('no tokens with the right key');
  try {
    await client(base, k + 'x').completions.create({ model: 'm', prompt: 'A', max_tokens: 2 });
  } catch (e) {
    if (e.status === 401) {
      console.log('OK key');
      return;
    }
    fail('wrong key: ' + e.status + ' ' + e.message);
  }
  fail('a wrong key was accepted');
}

async function stall(base, mark) {
  const net = require('net');
  const u = new URL(base);
  const body = JSON.stringify({ prompt: 'Once', max_tokens: 400, temperature: 0, stream: true });
  const sock = net.connect(Number(u.port), u.hostname, () => {
    sock.pause();                       // never read
    sock.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
               'Content-Length: ' + Buffer.byteLength(body) + '\r\n\r\n' + body);
    fs.writeFileSync(mark, 'sent\n');
  });
  sock.on('error', () => {});
  await new Promise((r) => setTimeout(r, 60000));
}

async function ctxlimit(base, ctx) {
  const c = client(base);
  const n = Number(ctx);
  const tries = [
    () => c.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: n }),
    () => c.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: n - 3,
                                  stream: true }),
  ];
  for (const t of tries) {
    try {
      await t();
    } catch (e) {
      if (e.status === 400 && e.code === 'context_length_exceeded' &&
          e.message.includes('the model context is ' + n + ' tokens') &&
          /\(\d+ in the prompt, max_tokens \d+\)/.test(e.message)) {
        console.log('OK ctxlimit ' + e.message);
        continue;
      }
      fail('unexpected error ' + e.status + ' ' + e.code + ' ' + e.message);
    }
    fail('a request past the context of ' + n + ' tokens was served');
  }
  // prompt ("Once upon a time": BOS + 4 tokens) + max_tokens = the context: served
  const r = await c.completions.create({ model: 'm', prompt: 'Once upon a time',
                                         max_tokens: n - 5, temperature: 0 });
  if (r.usage.prompt_tokens !== 5) fail('prompt_tokens ' + r.usage.prompt_tokens + ', not 5');
  console.log('OK ctxlimit fits: ' + r.usage.completion_tokens + ' tokens, ' +
              r.choices[0].finish_reason);
}

async function cached(base) {
  const c = client(base);
  const prompt = 'Once upon a time, there was a little girl named Lily. She loved to play ' +
                 'outside in the sun with her dog. One day she found a big red ball.';
  const ask = () => c.completions.create({ model: 'm', prompt, max_tokens: 8, temperature: 0 });
  const a = await ask(), b = await ask();
  const ct = (r) => r.usage && r.usage.prompt_tokens_details &&
                    r.usage.prompt_tokens_details.cached_tokens;
  if (typeof ct(a) !== 'number' || typeof ct(b) !== 'number')
    fail('no usage.prompt_tokens_details.cached_tokens: ' + JSON.stringify(b.usage));
  if (ct(b) <= ct(a) || ct(b) < 16 || ct(b) >= b.usage.prompt_tokens)
    fail('cached tokens ' + ct(a) + ' then ' + ct(b) + ' of ' + b.usage.prompt_tokens +
         ' prompt tokens (kv.block_tokens 16)');
  if (a.choices[0].text !== b.choices[0].text)
    fail('the reused prefix changed the text: ' + JSON.stringify(a.choices[0].text) + ' / ' +
         JSON.stringify(b.choices[0].text));
  console.log('OK cached ' + ct(a) + ' then ' + ct(b) + ' of ' + b.usage.prompt_tokens +
              ' prompt tokens, the same text');
}

async function unavailable(base) {
  const c = client(base);
  const tries = [
    () => c.completions.create({ model: 'm', prompt: 'Once', max_tokens: 4 }),
    () => c.completions.create({ model: 'm', prompt: 'Once', max_tokens: 4, stream: true }),
  ];
  for (const t of tries) {
    try {
      await t();
    } catch (e) {
      if (e.status === 503 && e.code === 'storage_unavailable' &&
          e.headers && e.headers['retry-after'] === '1') {
        console.log('OK unavailable ' + e.status + ' ' + e.message);
        continue;
      }
      fail('unexpected error ' + e.status + ' ' + e.code + ' ' + e.message);
    }
    fail('a request was served while no storage node was alive');
  }
}

const [scen, base, ...args] = process.argv.slice(2);
const table = { completion, cached, streams, chat, chat400, chatids, cancel, key, stall, ctxlimit, unavailable };
if (!table[scen]) fail('unknown scenario ' + scen);
table[scen](base, ...args).catch((e) => fail(scen + ': ' + (e.stack || e)));
