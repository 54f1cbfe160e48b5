import type { MiddlewareHandler } from "hono";
import { Problem } from "../core/problem.js";
import type { AppEnv } from "./app-env.js";

/** Most bytes of all request headers together, and of any one header. */
export const HEADER_LIMITS = { total: 16 * 1024, each: 8 * 1024 } as const;

/**
 * Refuses requests whose headers are larger than any client of this API needs (a signature is
 * about 200 bytes), with 431 naming the largest header, before anything parses them.
 */
export const limitHeaders: MiddlewareHandler<AppEnv> = async (c, next) => {
  let total = 0;
  let largest = { name: "", size: 0 };
  for (const [name, value] of c.req.raw.headers) {
    const size = name.length + value.length;
    total += size;
    if (size > largest.size) largest = { name, size };
  }
  if (total > HEADER_LIMITS.total || largest.size > HEADER_LIMITS.each) {
    throw new Problem(
      "headers-too-large",
      `the ${largest.name} header is ${largest.size} bytes and all headers ${total} bytes; at most ${HEADER_LIMITS.each} and ${HEADER_LIMITS.total}`,
      {
        field: `header.${largest.name}`,
      },
    );
  }
  await next();
};
