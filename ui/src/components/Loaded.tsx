import type { ReactNode } from "react";
import { ErrorBox, Loading, NotReported } from "./common";
import { Table, type TableProps } from "./Table";

/** What a page reads of a query: TanStack Query's result, or anything with the same two fields. */
type Read<T> = { data: T | null | undefined; error: unknown };

/**
 * A read of the controller as every page shows it: its error (above what was last read: a
 * polled query keeps its data when a refetch fails), "Loading …" until the first answer, "not
 * reported yet" where the controller has no such data (`missing`: a 404 read as null, or an
 * endpoint this controller lacks), `empty` instead of an empty list, else `children(data)`.
 */
export function Loaded<T>(props: {
  query: Read<T>;
  /** Named in "Loading {what}…". */
  what: string;
  /** Said instead of an empty list (unset: the children get the empty list). */
  empty?: ReactNode;
  /** Data the controller may not have: what is not reported yet, and whether it lacks the endpoint. */
  missing?: { what: string; absent?: boolean };
  children: (data: NonNullable<T>) => ReactNode;
}) {
  const { query, what, empty, missing } = props;
  const { data, error } = query;
  let body: ReactNode;
  if (missing && (missing.absent || data === null)) body = <NotReported what={missing.what} />;
  else if (data === undefined || data === null) body = error ? null : <Loading what={what} />;
  else if (empty !== undefined && Array.isArray(data) && !data.length) body = <p className="muted">{empty}</p>;
  else body = props.children(data);
  return (
    <>
      {error ? <ErrorBox error={error} /> : null}
      {body}
    </>
  );
}

/** A list read as a table: Loaded's error, loading and `empty`, then one row per item. */
export function LoadedTable<T>({ query, what, empty, ...table }: { query: Read<T[]>; what: string; empty: ReactNode } & Omit<TableProps<T>, "rows">) {
  return (
    <Loaded query={query} what={what} empty={empty}>
      {(rows) => <Table {...table} rows={rows} />}
    </Loaded>
  );
}
