// Types of api-types.mjs for the drift test (src/api/schema.gen.test.ts), which tsc checks.
export const OPENAPI: string;
export const OUTPUT: string;
export function generate(path?: string): Promise<string>;
export function committed(): Promise<string>;
