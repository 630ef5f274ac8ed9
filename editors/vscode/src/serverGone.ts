/**
 * Which connection errors say only that the server is gone. Pure: no `vscode` import.
 *
 * A server that exits while the client writes to it: the write fails with EPIPE when it comes after the process died
 * but before Node has seen it exit, an 'error' event on the server's stdin that vscode-jsonrpc passes on without an
 * error count; later writes fail with ERR_STREAM_DESTROYED. The failed stream is destroyed, so the connection's close
 * follows, and the close is what tells a crash (counted, restarted, given up on after five).
 */
const GONE_CODES: ReadonlySet<string> = new Set(['EPIPE', 'ERR_STREAM_DESTROYED']);

export function serverGone(error: unknown): boolean {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && GONE_CODES.has(code);
}
