// One editor draft, the same for the tenant & rule editor and the policy editor: the text,
// its syntax errors (live, and nothing is sent while there are any), and the controller's
// refusal of a submitted text, marked at its lines for as long as the text is the one refused.
import { useCallback, useMemo, useState } from "react";
import type { Diagnostic } from "./documents";

/** What the controller said about one submitted text. */
export type Refusal = { text: string; diagnostics: Diagnostic[]; error: unknown };

export const SYNTAX_BLOCK = "fix the marked YAML errors first";

/** The marks to show: syntax errors while there are any, else the refusal of this very text. */
export function shownDiagnostics(text: string, syntax: Diagnostic[], refusal: Refusal | null): Diagnostic[] {
  if (syntax.length) return syntax;
  return refusal && refusal.text === text ? refusal.diagnostics : [];
}

/**
 * Runs `send` with the text; a refusal is what it returns (errors it mapped itself) or what it
 * throws (mapped by `locate`). Returns the refusal, or null when the controller accepted.
 */
export async function submitDraft(
  text: string,
  send: (text: string) => Promise<Omit<Refusal, "text"> | null | void>,
  locate: (text: string, error: unknown) => Diagnostic[],
): Promise<Refusal | null> {
  try {
    const refused = await send(text);
    return refused && (refused.error || refused.diagnostics.length) ? { text, ...refused } : null;
  } catch (error) {
    return { text, diagnostics: locate(text, error), error };
  }
}

export type Draft = {
  text: string;
  setText(text: string): void;
  syntax: Diagnostic[];
  diagnostics: Diagnostic[];
  /** The refusal of the text as it is now, if any. */
  refusal: Refusal | null;
  busy: boolean;
  /** Why nothing can be sent now (syntax errors), or null. */
  blocked: string | null;
  submit(send: (text: string) => Promise<Omit<Refusal, "text"> | null | void>): Promise<boolean>;
};

export function useDraft(opts: {
  initial: string;
  syntax: (text: string) => Diagnostic[];
  locate?: (text: string, error: unknown) => Diagnostic[];
  /** Told about every refusal (the session learns a 403 from it). */
  onRefusal?: (error: unknown) => void;
}): Draft {
  const { syntax: check, locate, onRefusal } = opts;
  const [text, setText] = useState(opts.initial);
  const [refusal, setRefusal] = useState<Refusal | null>(null);
  const [busy, setBusy] = useState(false);
  const syntax = useMemo(() => check(text), [check, text]);

  const submit = useCallback(
    async (send: (text: string) => Promise<Omit<Refusal, "text"> | null | void>) => {
      setBusy(true);
      setRefusal(null);
      try {
        const refused = await submitDraft(text, send, locate ?? (() => []));
        if (refused) {
          onRefusal?.(refused.error);
          setRefusal(refused);
        }
        return refused === null;
      } finally {
        setBusy(false);
      }
    },
    [text, locate, onRefusal],
  );

  return {
    text,
    setText,
    syntax,
    diagnostics: shownDiagnostics(text, syntax, refusal),
    refusal: refusal && refusal.text === text ? refusal : null,
    busy,
    blocked: syntax.length ? SYNTAX_BLOCK : null,
    submit,
  };
}
