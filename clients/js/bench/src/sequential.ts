/**
 * One connection, closed loop, timed to the microsecond: `GET` after `GET` on one kept-alive
 * connection, each request's latency from its write to its last byte read (`performance.now()`),
 * for `seconds`. autocannon reports whole milliseconds, too coarse for a tail a millisecond or two
 * long; this is the driver of the one-connection figures.
 */
import http from 'node:http';

/** Latency percentiles (ms) and throughput of one window. */
export interface Window {
  requests: number;
  rps: number;
  mean: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  non2xx: number;
  /** What `sample` measured over the window (the last sample less the first), e.g. CPU times. */
  cpu: number[];
}

function get(agent: http.Agent, port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ agent, host: '127.0.0.1', port, path }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

function percentile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/**
 * Drives `http://127.0.0.1:<port><path>` for `seconds` (after `warmup` seconds not counted);
 * `sample` is read when the window starts and when it ends.
 */
export async function sequential(
  port: number,
  path: string,
  seconds: number,
  warmup = 1,
  sample: () => number[] = () => [],
): Promise<Window> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const warmUntil = performance.now() + warmup * 1000;
    while (performance.now() < warmUntil) await get(agent, port, path);
    const latencies: number[] = [];
    let non2xx = 0;
    const first = sample();
    const started = performance.now();
    const until = started + seconds * 1000;
    for (let now = started; now < until; ) {
      const status = await get(agent, port, path);
      const after = performance.now();
      latencies.push(after - now);
      if (status < 200 || status >= 300) non2xx += 1;
      now = after;
    }
    const elapsed = (performance.now() - started) / 1000;
    const last = sample();
    const sorted = Float64Array.from(latencies).sort();
    return {
      requests: sorted.length,
      rps: sorted.length / elapsed,
      mean: sorted.reduce((a, b) => a + b, 0) / sorted.length,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      p999: percentile(sorted, 0.999),
      max: sorted[sorted.length - 1]!,
      non2xx,
      cpu: last.map((v, i) => v - first[i]!),
    };
  } finally {
    agent.destroy();
  }
}
