import type * as Cel from "@marcbachmann/cel-js/evaluator";

/**
 * The CEL library (`@marcbachmann/cel-js`, a job's `when:` condition: shared/flow/expression.ts)
 * as the Worker's bundle has it: loaded on its first use, not at an isolate's start. Its module
 * builds its registry of functions and overloads when evaluated, about a tenth of the script's
 * start (docs/architecture.md, "Cold start"), and most isolates never read a condition.
 * wrangler.toml's `[alias]` points the package's two import paths here; Node (the CLI, the tests
 * outside workerd) imports the package itself.
 *
 * A `require()`, which esbuild turns into a call of the module's wrapped top level, made the
 * first time it runs; an `import()` would be as lazy but asynchronous, and conditions are
 * checked and evaluated synchronously (inside zod's refinements and the pure flow machine). The
 * path names the file, not the package, so that the alias does not bring it back here.
 */
declare const require: (path: string) => typeof Cel;

let cel: typeof Cel | undefined;
const load = (): typeof Cel => (cel ??= require("../../node_modules/@marcbachmann/cel-js/lib/evaluator.js"));

/** `new Environment(options)`: the library's, loaded now. */
export const Environment = function Environment(options?: ConstructorParameters<typeof Cel.Environment>[0]) {
  return new (load().Environment)(options);
} as unknown as typeof Cel.Environment;

/** `x instanceof Duration`: none can be one before the library is loaded. */
export const Duration = {
  [Symbol.hasInstance]: (value: unknown) => cel !== undefined && value instanceof cel.Duration,
} as unknown as typeof Cel.Duration;

/** `x instanceof UnsignedInt`, likewise. */
export const UnsignedInt = {
  [Symbol.hasInstance]: (value: unknown) => cel !== undefined && value instanceof cel.UnsignedInt,
} as unknown as typeof Cel.UnsignedInt;
