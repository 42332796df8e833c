// CodeMirror 6 with YAML highlighting; diagnostics (parse errors, schema errors the API named)
// are marked at their line in the gutter and listed under the editor.
import { useEffect, useRef } from "react";
import { EditorState } from "@codemirror/state";
import { EditorView, keymap, lineNumbers, highlightActiveLine } from "@codemirror/view";
import { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
import { yaml } from "@codemirror/lang-yaml";
import { syntaxHighlighting, defaultHighlightStyle } from "@codemirror/language";
import { lintGutter, setDiagnostics, type Diagnostic as CmDiagnostic } from "@codemirror/lint";
import type { Diagnostic } from "../yaml/documents";

/** Editor diagnostics at document offsets: the given range, or the whole of the given line. */
export function toCodeMirror(text: string, diagnostics: Diagnostic[]): CmDiagnostic[] {
  const lines = text.split("\n");
  const lineStart = (n: number) => {
    let off = 0;
    for (let i = 0; i < Math.min(n - 1, lines.length); i++) off += lines[i].length + 1;
    return off;
  };
  return diagnostics.map((d) => {
    const line = Math.max(1, Math.min(d.line, lines.length));
    let from = d.from ?? lineStart(line);
    let to = d.to ?? lineStart(line) + (lines[line - 1]?.length ?? 0);
    from = Math.max(0, Math.min(from, text.length));
    to = Math.max(from, Math.min(to, text.length));
    return { from, to, severity: "error", message: `line ${line}: ${d.message}` };
  });
}

export function YamlEditor({
  value,
  onChange,
  diagnostics,
  readOnly = false,
}: {
  value: string;
  onChange: (text: string) => void;
  diagnostics: Diagnostic[];
  readOnly?: boolean;
}) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const onChangeRef = useRef(onChange);
  onChangeRef.current = onChange;

  useEffect(() => {
    if (!host.current) return;
    const v = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: value,
        extensions: [
          lineNumbers(),
          highlightActiveLine(),
          history(),
          keymap.of([...defaultKeymap, ...historyKeymap]),
          yaml(),
          syntaxHighlighting(defaultHighlightStyle),
          lintGutter(),
          EditorState.readOnly.of(readOnly),
          EditorView.updateListener.of((u) => {
            if (u.docChanged) onChangeRef.current(u.state.doc.toString());
          }),
        ],
      }),
    });
    view.current = v;
    return () => {
      v.destroy();
      view.current = null;
    };
    // the editor owns its text after creation; `value` changes from outside are applied below
    // (so `value` is deliberately not a dependency here)
  }, [readOnly]);

  useEffect(() => {
    const v = view.current;
    if (v && v.state.doc.toString() !== value) {
      v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: value } });
    }
  }, [value]);

  useEffect(() => {
    const v = view.current;
    if (v) v.dispatch(setDiagnostics(v.state, toCodeMirror(v.state.doc.toString(), diagnostics)));
  }, [diagnostics, value]);

  return (
    <div>
      <div className="editor" ref={host} data-testid="yaml-editor" />
      {diagnostics.length ? (
        <ul className="diagnostics" data-testid="editor-errors">
          {diagnostics.map((d, i) => (
            <li key={i} data-testid="editor-error" data-line={d.line}>
              line {d.line}: {d.message}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  );
}
