// Raw HTTP over a TCP socket, for what the official clients cannot send: bad framing, pipelined requests,
// HTTP/1.0, headers trickled byte by byte. Every read has a deadline, so a server that hangs fails the test.
import net from 'node:net';

// Sends `bytes` (string or Buffer), then collects everything the server sends until it closes the connection
// or `timeoutMs` passes. Resolves {data, closed, timedOut}.
export function exchange(port, bytes, { timeoutMs = 10000, keepOpen = false } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    const sock = net.connect(port, '127.0.0.1');
    let settled = false;
    const done = (closed, timedOut) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data: Buffer.concat(chunks).toString('latin1'), closed, timedOut });
    };
    const timer = setTimeout(() => done(false, true), timeoutMs);
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => done(true, false));
    sock.on('error', () => done(true, false));
    sock.on('connect', () => {
      if (bytes !== null) sock.write(bytes);
      if (!keepOpen) return;
    });
  });
}

// Splits a byte string of one or more HTTP/1.x responses into [{status, headers (lower-case), body}].
// Handles Content-Length, chunked and (last response only) close-delimited bodies.
export function parseResponses(data) {
  const out = [];
  let at = 0;
  while (at < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', at);
    if (headEnd < 0) throw new Error(`incomplete response head: ${JSON.stringify(data.slice(at, at + 200))}`);
    const lines = data.slice(at, headEnd).split('\r\n');
    const m = lines[0].match(/^HTTP\/1\.[01] (\d{3})/);
    if (!m) throw new Error(`bad status line ${JSON.stringify(lines[0])}`);
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    at = headEnd + 4;
    let body = '';
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const lineEnd = data.indexOf('\r\n', at);
        const size = parseInt(data.slice(at, lineEnd), 16);
        at = lineEnd + 2;
        if (size === 0) {
          at += 2;
          break;
        }
        body += data.slice(at, at + size);
        at += size + 2;
      }
    } else if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      body = data.slice(at, at + n);
      at += n;
    } else {
      body = data.slice(at);
      at = data.length;
    }
    out.push({ status: Number(m[1]), headers, body });
  }
  return out;
}

// Opens a connection that sends a request head one byte every `intervalMs` and never finishes it.
// Returns {socket, closed: Promise<string>} (resolves with whatever the server sent when it closed).
export function slowHeaders(port, { intervalMs = 500 } = {}) {
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(10000);
  const sock = net.connect(port, '127.0.0.1');
  let i = 0;
  const chunks = [];
  const timer = setInterval(() => {
    if (i < head.length && !sock.destroyed) sock.write(head[i++]);
  }, intervalMs);
  const closed = new Promise((resolve) => {
    const end = () => {
      clearInterval(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    };
    sock.on('data', (d) => chunks.push(d));
    sock.on('close', end);
    sock.on('error', () => {});
  });
  return { socket: sock, closed, stop: () => { clearInterval(timer); sock.destroy(); } };
}
