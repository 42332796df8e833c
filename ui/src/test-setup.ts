import { afterEach } from "vitest";
import { cleanup } from "@testing-library/react";

afterEach(() => {
  cleanup();
  // absent in the tests that run in node (schema.gen.test.ts runs the generator, not a page)
  globalThis.sessionStorage?.clear();
});
