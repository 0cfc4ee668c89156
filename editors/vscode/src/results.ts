/**
 * What the server's audit commands answer, turned into one line for the user.
 *
 * The server reports a failed audit (backend down, unreadable file, no workspace folder) as an
 * `error` field in the result rather than as a request error, so the command must look at it;
 * otherwise a manual audit that did nothing would look like one that found nothing.
 */

export interface AuditOutcome {
  /** Why the audit did not run or did not finish. */
  error?: string;
  /** What it did. */
  summary?: string;
}

function count(value: unknown, noun: string): string | undefined {
  if (typeof value !== "number") {
    return undefined;
  }
  return `${value} ${noun}${value === 1 ? "" : "s"}`;
}

/** `{units, done, findings, error}` from k3lsp.auditFile, `{files, error}` from k3lsp.auditWorkspace. */
export function auditOutcome(result: unknown): AuditOutcome {
  if (typeof result !== "object" || result === null) {
    return {};
  }
  const r = result as Record<string, unknown>;
  if (typeof r.error === "string" && r.error) {
    return { error: r.error };
  }
  if (r.cancelled === true) {
    return {}; // superseded by a newer audit of the same file, which reports for itself
  }
  if (typeof r.findings === "number") {
    return { summary: `k3: ${count(r.findings, "finding")} in ${count(r.units, "function") ?? "the file"}` };
  }
  if (typeof r.files === "number") {
    return { summary: `k3: audited ${count(r.files, "file")}` };
  }
  return {};
}
