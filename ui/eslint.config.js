// The dashboard's lint: eslint's and typescript-eslint's recommended rules over the sources
// (./lachesis test lint runs it; the generated API types are left out).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "node_modules/", "src/api/schema.gen.ts"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // A stub's parameters it must take but does not use are named `_...`.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
    },
  },
);
