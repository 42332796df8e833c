/// <reference types="vitest/config" />
import { defineConfig } from "vite";

// The dashboard is served by the controller at /ui/ (same origin as /api/v1, so the bearer
// token needs no CORS). For `npm run dev` and `npm run preview`, API calls are proxied to the
// controller named by LACHESIS_URL (default http://127.0.0.1:8080).
const controller = process.env.LACHESIS_URL ?? "http://127.0.0.1:8080";
const proxy = Object.fromEntries(
  ["/api", "/healthz", "/readyz", "/openapi.json"].map((p) => [p, { target: controller, changeOrigin: false }]),
);

export default defineConfig({
  base: "/ui/",
  esbuild: { jsx: "automatic" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    chunkSizeWarningLimit: 1500,
    rollupOptions: {
      onwarn(warning, warn) {
        // TanStack Query's "use client" directives mean nothing outside React Server Components.
        if (warning.code === "MODULE_LEVEL_DIRECTIVE") return;
        warn(warning);
      },
    },
  },
  server: { proxy },
  preview: { proxy },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
    setupFiles: ["src/test-setup.ts"],
  },
});
