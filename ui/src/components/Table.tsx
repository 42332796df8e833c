import type { ReactNode } from "react";

export type TableProps<T> = { head: ReactNode[]; rows: readonly T[]; row: (item: T, index: number) => ReactNode; testId?: string; className?: string };

/** A table: a header row of column names, then one `<tr>` per item (`row` renders it, with its key). */
export function Table<T>(props: TableProps<T>) {
  return (
    <table data-testid={props.testId} className={props.className}>
      <thead>
        <tr>
          {props.head.map((h, i) => (
            <th key={i}>{h}</th>
          ))}
        </tr>
      </thead>
      <tbody>{props.rows.map(props.row)}</tbody>
    </table>
  );
}
