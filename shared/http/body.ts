/**
 * A request's body read once, or null when it is larger than `limit` bytes: refused on its
 * declared Content-Length up front, or counted while a chunked body is read. For the Node
 * servers of the project (the runner's push server, the local REST endpoint) and the Worker,
 * which need the exact bytes before anything parses them.
 */
export function readBoundedBody(request: Request, limit: number): Promise<Uint8Array<ArrayBuffer> | null> {
  return readBounded(request, limit);
}

/**
 * A request's or a response's body read once, or null when it is larger than `limit` bytes (its
 * declared Content-Length, or what arrives): what is left of a body past the limit is not read.
 */
export async function readBounded(message: Request | Response, limit: number): Promise<Uint8Array<ArrayBuffer> | null> {
  const declared = message.headers.get("content-length");
  if (Number(declared ?? 0) > limit) return null;
  // Node's parser holds a body to its declared length, so only a chunked one needs counting.
  if (declared !== null || !message.body) return new Uint8Array(await message.arrayBuffer());
  const reader = message.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    size += next.value.length;
    // No cancel: it would destroy the socket before the 413 is out; the server drains the rest.
    if (size > limit) return null;
    chunks.push(next.value);
  }
  const out = new Uint8Array(new ArrayBuffer(size));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}
