/**
 * What a template's name may be: it is part of a Redis key and of URLs. Apart from the zod schemas
 * (template.ts) so that the console, which keeps zod out of its bundle, checks names the same way.
 */
export const TEMPLATE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
