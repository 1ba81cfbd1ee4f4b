// tests/serve/slowloris.cjs — slow clients against `nearattn serve` (node's
// net and http modules only). Usage: node slowloris.cjs PORT PER_IP
// REQUEST_TIMEOUT_S [PARTS]; PARTS (default cap,deadline,flood) picks the
// checks below; prints "OK ..." lines and exits 0, or prints the reason
// and exits 1. Source addresses 127.0.0.x (all of 127/8 is the loopback).
//   1. one address opens 3 x PER_IP connections: at most PER_IP stay open
//   2. a connection that sends a valid header one byte a second is closed by
//      the server after about REQUEST_TIMEOUT_S (never within 1 s)
//   3. 10 addresses x 14 slow connections (more than the server's connection
//      limit), reopened as soon as they are closed, while /health is probed
//      from 127.0.0.1 every 0.5 s for 3 x REQUEST_TIMEOUT_S: every probe must
//      be answered 200 within 10 s (bounds loose for a busy machine)
'use strict';
const net = require('net');
const http = require('http');

const port = +process.argv[2];
const perIp = +process.argv[3];
const reqS = +process.argv[4];
const parts = (process.argv[5] || 'cap,deadline,flood').split(',');
const HDR = 'GET /health HTTP/1.1\r\nHost: x\r\n' + 'X-Slow: ' + 'a'.repeat(400) + '\r\n\r\n';

function fail(msg) {
  console.error('FAIL: ' + msg);
  process.exit(1);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A connection from addr that sends HDR one byte every `every` ms; calls
// onClose(ms it lived, whether it ever connected) when it ends.
function slow(addr, every, onClose) {
  const t0 = Date.now();
  let i = 0, timer = null, connected = false;
  const s = net.connect({ host: '127.0.0.1', port, localAddress: addr });
  s.on('connect', () => {
    connected = true;
    timer = setInterval(() => { if (i < HDR.length) s.write(HDR[i++]); }, every);
  });
  s.on('error', () => {});
  s.on('data', () => {});
  s.on('close', () => { clearInterval(timer); onClose(Date.now() - t0, connected); });
  return s;
}

function health(timeoutMs) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const req = http.get({ host: '127.0.0.1', port, path: '/health', localAddress: '127.0.0.1',
                           agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, ms: Date.now() - t0 }));
    });
    req.on('timeout', () => { req.destroy(); resolve({ status: 'timeout', ms: Date.now() - t0 }); });
    req.on('error', (e) => resolve({ status: e.code || String(e), ms: Date.now() - t0 }));
  });
}

async function perAddress() {
  const socks = [];
  let closed = 0;
  for (let i = 0; i < 3 * perIp; i++)
    socks.push(slow('127.0.0.50', 1000, () => { closed++; }));
  await sleep(1500);
  const open = socks.length - closed;
  socks.forEach((s) => s.destroy());
  if (open > perIp) fail(`one address holds ${open} connections, the cap is ${perIp}`);
  if (open < 1) fail('one address got no connection at all');
  console.log(`OK per-address cap: ${open} of ${socks.length} open (cap ${perIp})`);
  await sleep(500);
}

async function deadline() {
  const r = await new Promise((resolve) => slow('127.0.0.60', 1000,
                                                (ms, c) => resolve({ ms, c })));
  if (!r.c) fail('the trickling connection did not connect');
  if (r.ms < 1000) fail(`the trickling connection was closed after ${r.ms} ms: too soon`);
  if (r.ms > reqS * 1000 + 15000)
    fail(`the trickling connection lived ${r.ms} ms, past --request-timeout ${reqS} s`);
  console.log(`OK a header sent one byte a second: closed after ${r.ms} ms ` +
              `(--request-timeout ${reqS} s)`);
}

async function flood() {
  let stop = false, opened = 0;
  const keep = (addr) => {
    if (stop) return;
    opened++;
    slow(addr, 1000, () => setTimeout(() => keep(addr), 250));
  };
  for (let a = 2; a < 12; a++)
    for (let k = 0; k < 14; k++)
      keep('127.0.0.' + a);
  await sleep(2000);
  const t_end = Date.now() + 3 * reqS * 1000;
  let n = 0, worst = 0;
  while (Date.now() < t_end) {
    const r = await health(10000);
    n++;
    if (r.status !== 200)
      fail(`/health during the flood: ${r.status} after ${r.ms} ms (probe ${n})`);
    worst = Math.max(worst, r.ms);
    await sleep(500);
  }
  stop = true;
  console.log(`OK /health answered ${n} times during a flood of ${opened} slow connections ` +
              `(slowest ${worst} ms)`);
}

(async () => {
  if (parts.includes('cap')) await perAddress();
  if (parts.includes('deadline')) await deadline();
  if (parts.includes('flood')) await flood();
  process.exit(0);
})();
