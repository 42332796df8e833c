// The editor block both YAML pages share: a toolbar (load the example, then the page's own
// buttons), CodeMirror with the draft's marks, and the controller's refusal under it.
import type { ReactNode } from "react";
import type { Draft } from "../yaml/draft";
import { ErrorBox } from "./common";
import { YamlEditor } from "./YamlEditor";

export function DraftEditor({ draft, example, children }: { draft: Draft; example: string; children?: ReactNode }) {
  return (
    <>
      <div className="toolbar">
        <button type="button" className="btn plain" onClick={() => draft.setText(example)}>
          Load example
        </button>
        {children}
      </div>
      <YamlEditor value={draft.text} onChange={draft.setText} diagnostics={draft.diagnostics} />
      {draft.refusal?.error ? <ErrorBox error={draft.refusal.error} /> : null}
    </>
  );
}
