import type { FloodgateClient } from './client.js';

/** The events of an outgoing response (Node's `ServerResponse`, Express's) that say it ended. */
export type EndEvent = 'finish' | 'close' | 'error';

/** The parts of an outgoing response that {@link releaseOnEnd} listens to. */
export interface OutgoingLike {
  on(event: EndEvent, listener: (error?: unknown) => void): unknown;
  off(event: EndEvent, listener: (error?: unknown) => void): unknown;
  listenerCount(event: 'error'): number;
  /** Set once the response has been sent. */
  writableFinished?: boolean;
  /** Set once the response is destroyed (e.g. the client went away). */
  destroyed?: boolean;
}

/**
 * Frees the concurrency permits of a check (its `reservation`) when `response` ends: on its
 * `finish` (sent), `close` (the connection went away first) or `error`, whichever comes first,
 * exactly once; at once when the response has already ended. The check's costs stay counted.
 *
 * A release that fails is counted by the client (`stats()`, `onFailure`) and otherwise ignored:
 * the permits then end with their lease. An `error` is still thrown as it would have been when
 * nothing else listens for it.
 */
export function releaseOnEnd(client: FloodgateClient, reservation: string, response: OutgoingLike): void {
  const release = (): void => {
    client.release(reservation).catch(() => {
      // counted by the client; the permits end with their lease
    });
  };
  if (response.writableFinished === true || response.destroyed === true) return release();
  const ended = (error?: unknown): void => {
    response.off('finish', ended);
    response.off('close', ended);
    response.off('error', ended);
    release();
    if (error !== undefined && response.listenerCount('error') === 0) throw error;
  };
  response.on('finish', ended);
  response.on('close', ended);
  response.on('error', ended);
}
