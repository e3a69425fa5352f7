import http from 'node:http';
import https from 'node:https';

/** An answer read whole: the status, the headers (lowercase names), the body. */
export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** How a call reaches the server: one request, read whole, within `deadline` ms. */
export interface Transport {
  /**
   * Sends the request; rejects with {@link DeadlineExceeded} at the deadline, with the signal's
   * reason when `signal` aborts, and with the network error otherwise.
   */
  send(method: 'GET' | 'POST', path: string, body: string | undefined, deadline: number, signal?: AbortSignal): Promise<Answer>;
}

/** The deadline of a request passed before its answer was read. */
export class DeadlineExceeded extends Error {
  override readonly name = 'DeadlineExceeded';
  readonly code = 'ETIMEDOUT';

  constructor(deadline: number) {
    super(`no answer within ${deadline} ms`);
  }
}

/**
 * Node's own HTTP client on a keep-alive agent: connections are pooled and reused (the most
 * recently used first, so that idle ones close), an idle one is closed after 30 s (before the
 * server's 60 s idle timeout can race a request on it). Per request it allocates the request and
 * its callbacks only; the target and the fixed headers are computed once.
 */
export class NodeTransport implements Transport {
  private readonly agent: http.Agent;
  private readonly request: typeof http.request;
  private readonly hostname: string;
  private readonly port: number;
  private readonly prefix: string;
  private readonly headers: http.OutgoingHttpHeaders;

  constructor(url: URL, headers: Record<string, string>, agent?: http.Agent) {
    const secure = url.protocol === 'https:';
    this.request = secure ? https.request : http.request;
    this.agent = agent ?? new (secure ? https.Agent : http.Agent)({ keepAlive: true, timeout: 30_000, scheduling: 'lifo' });
    this.hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');
    this.port = url.port === '' ? (secure ? 443 : 80) : Number(url.port);
    this.prefix = url.pathname.replace(/\/+$/, '');
    this.headers = { ...headers };
  }

  send(method: 'GET' | 'POST', path: string, body: string | undefined, deadline: number, signal?: AbortSignal): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      let done = false;
      const req = this.request(
        {
          agent: this.agent,
          hostname: this.hostname,
          port: this.port,
          method,
          path: this.prefix + path,
          headers: body === undefined ? this.headers : { ...this.headers, 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
          });
          res.on('end', () => finish(undefined, { status: res.statusCode ?? 0, headers: res.headers, text }));
          res.on('error', (error) => finish(error));
        },
      );
      // Settled first, then the request is destroyed: whatever error the destruction raises (on
      // the request or on an answer half read) comes after, and changes nothing.
      const timer = setTimeout(() => {
        finish(new DeadlineExceeded(deadline));
        req.destroy();
      }, deadline);
      const onAbort = (): void => {
        finish(signal?.reason);
        req.destroy();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const finish = (error: unknown, answer?: Answer): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (answer !== undefined) resolve(answer);
        else reject(error);
      };
      req.on('error', (error) => finish(error));
      req.end(body);
    });
  }
}

/** A `fetch` of the caller's (`FloodgateClientOptions.fetch`): the request aborted at the deadline. */
export class FetchTransport implements Transport {
  constructor(
    private readonly url: string,
    private readonly headers: Record<string, string>,
    private readonly fetchImpl: typeof fetch,
  ) {}

  async send(method: 'GET' | 'POST', path: string, body: string | undefined, deadline: number, signal?: AbortSignal): Promise<Answer> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new DeadlineExceeded(deadline)), deadline);
    const onAbort = (): void => controller.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const init: RequestInit = { method, headers: this.headers, signal: controller.signal };
      if (body !== undefined) init.body = body;
      const response = await this.fetchImpl(`${this.url}${path}`, init);
      const text = await response.text();
      const headers: Record<string, string> = {};
      response.headers.forEach((value, name) => {
        headers[name] = value;
      });
      return { status: response.status, headers, text };
    } catch (error) {
      if (controller.signal.reason instanceof DeadlineExceeded) throw controller.signal.reason;
      throw error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }
}
