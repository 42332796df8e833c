// The REST API's TypeScript types, generated from api-schemas/openapi.json (the document the
// controller exports) by openapi-typescript. `npm run gen:api` writes src/api/schema.gen.ts;
// src/api/schema.gen.test.ts regenerates in memory and fails when the committed file drifted.
// Only `components` (the schemas) is kept: the dashboard calls the API through its own client
// (src/api/client.ts), and the per-path and per-operation interfaces would be thousands of
// lines of nothing it reads.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

export const OPENAPI = fileURLToPath(new URL("../../api-schemas/openapi.json", import.meta.url));
export const OUTPUT = fileURLToPath(new URL("../src/api/schema.gen.ts", import.meta.url));

const HEADER = `// Generated from api-schemas/openapi.json by \`npm run gen:api\` (ui/scripts/api-types.mjs).
// Do not edit: change the controller, export openapi.json, then regenerate.

`;

/** The text of schema.gen.ts for the OpenAPI document at `path`. */
export async function generate(path = OPENAPI) {
  const document = JSON.parse(await readFile(path, "utf8"));
  const nodes = await openapiTS(document);
  return HEADER + astToString(nodes.filter((node) => node.name?.escapedText === "components"));
}

/** The text of the committed schema.gen.ts. */
export const committed = () => readFile(OUTPUT, "utf8");

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await writeFile(OUTPUT, await generate());
  console.log(`wrote ${OUTPUT}`);
}
