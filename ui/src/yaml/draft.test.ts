import { describe, expect, it } from "vitest";
import { act, renderHook } from "@testing-library/react";
import { shownDiagnostics, submitDraft, useDraft, SYNTAX_BLOCK } from "./draft";
import { policySyntax } from "./policy";

const refusal = { text: "a: 1\n", diagnostics: [{ line: 1, message: "refused" }], error: new Error("no") };

describe("shownDiagnostics", () => {
  it("shows syntax errors first, then the refusal of this very text, then nothing", () => {
    expect(shownDiagnostics("a: [", [{ line: 1, message: "syntax" }], refusal)).toEqual([{ line: 1, message: "syntax" }]);
    expect(shownDiagnostics("a: 1\n", [], refusal)).toEqual(refusal.diagnostics);
    expect(shownDiagnostics("a: 2\n", [], refusal)).toEqual([]);
  });
});

describe("submitDraft", () => {
  it("maps a thrown refusal with locate, takes a returned one as it is, and accepts otherwise", async () => {
    const thrown = await submitDraft("x", () => Promise.reject(new Error("boom")), () => [{ line: 3, message: "here" }]);
    expect(thrown).toMatchObject({ text: "x", diagnostics: [{ line: 3, message: "here" }] });
    const returned = await submitDraft("x", async () => ({ diagnostics: [{ line: 2, message: "m" }], error: "e" }), () => []);
    expect(returned).toEqual({ text: "x", diagnostics: [{ line: 2, message: "m" }], error: "e" });
    expect(await submitDraft("x", async () => ({ diagnostics: [], error: null }), () => [])).toBeNull();
    expect(await submitDraft("x", async () => undefined, () => [])).toBeNull();
  });
});

describe("useDraft", () => {
  it("blocks sending while the YAML does not parse, holds a refusal until the text changes", async () => {
    const refusals: unknown[] = [];
    const { result } = renderHook(() => useDraft({ initial: "a: [", syntax: policySyntax, onRefusal: (e) => refusals.push(e) }));
    expect(result.current.blocked).toBe(SYNTAX_BLOCK);
    act(() => result.current.setText("a: 1\n"));
    expect(result.current.blocked).toBeNull();
    let accepted = true;
    await act(async () => {
      accepted = await result.current.submit(async () => ({ diagnostics: [{ line: 1, message: "schema" }], error: "403?" }));
    });
    expect(accepted).toBe(false);
    expect(refusals).toEqual(["403?"]);
    expect(result.current.diagnostics).toEqual([{ line: 1, message: "schema" }]);
    expect(result.current.refusal?.error).toBe("403?");
    act(() => result.current.setText("a: 2\n"));
    expect(result.current.diagnostics).toEqual([]);
    expect(result.current.refusal).toBeNull();
    await act(async () => {
      accepted = await result.current.submit(async () => undefined);
    });
    expect(accepted).toBe(true);
  });
});
