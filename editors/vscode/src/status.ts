/**
 * The backend state the server pushes as `k3lsp/status`, turned into status bar text.
 *
 * Kept free of VS Code types so every state's text can be unit-tested; extension.ts only copies
 * a `StatusView` onto the status bar item.
 */

export const STATUS_NOTIFICATION = "k3lsp/status";

export const BACKEND_STATES = ["connected", "connecting", "down", "unauthorized"] as const;
export type BackendState = (typeof BACKEND_STATES)[number];

/** Params of the `k3lsp/status` notification. */
export interface BackendStatus {
  state: BackendState;
  queued: number;
  running: number;
  message?: string;
}

/** What the status bar item shows. `error` selects the error background colour. */
export interface StatusView {
  text: string;
  tooltip: string;
  error: boolean;
}

const CLICK_HINT = "Click for the backend status.";

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 0;
}

/** Validates the notification params; a server bug must not show nonsense like "NaN queued". */
export function parseStatus(params: unknown): BackendStatus {
  if (typeof params !== "object" || params === null) {
    throw new Error(`k3lsp/status: expected an object, got ${JSON.stringify(params)}`);
  }
  const p = params as Record<string, unknown>;
  if (!BACKEND_STATES.includes(p.state as BackendState)) {
    throw new Error(`k3lsp/status: unknown state ${JSON.stringify(p.state)}`);
  }
  if (!isCount(p.queued) || !isCount(p.running)) {
    throw new Error(`k3lsp/status: queued and running must be counts, got ${JSON.stringify(params)}`);
  }
  if (p.message !== undefined && p.message !== null && typeof p.message !== "string") {
    throw new Error(`k3lsp/status: message must be a string, got ${JSON.stringify(p.message)}`);
  }
  return { state: p.state as BackendState, queued: p.queued, running: p.running, message: p.message ?? undefined };
}

function workText(status: BackendStatus): string {
  const parts: string[] = [];
  if (status.running > 0) {
    parts.push(`${status.running} running`);
  }
  if (status.queued > 0) {
    parts.push(`${status.queued} queued`);
  }
  return parts.join(", ");
}

function tooltip(headline: string, message: string | undefined): string {
  return [headline, message, CLICK_HINT].filter(Boolean).join("\n");
}

export function statusView(status: BackendStatus): StatusView {
  const work = workText(status);
  switch (status.state) {
    case "connected":
      return {
        text: `$(shield) k3: ${work || "idle"}`,
        tooltip: tooltip(`k3 audit backend connected${work ? `: ${work}` : ""}.`, status.message),
        error: false,
      };
    case "connecting":
      return {
        text: `$(sync~spin) k3: connecting${work ? ` (${work})` : ""}`,
        tooltip: tooltip("Connecting to the k3 audit backend.", status.message),
        error: false,
      };
    case "down":
      return {
        text: "$(error) k3: backend down",
        tooltip: tooltip("The k3 audit backend is unreachable; cached findings stay shown.", status.message),
        error: true,
      };
    case "unauthorized":
      return {
        text: "$(lock) k3: key refused",
        tooltip: tooltip(
          "The k3 audit backend refused this client's key (k3lsp.serverKey / k3lsp.clientKey).",
          status.message,
        ),
        error: true,
      };
  }
}

/** Before the server has said anything. */
export const STARTING_VIEW: StatusView = {
  text: "$(sync~spin) k3: starting",
  tooltip: tooltip("Starting the k3lsp language server.", undefined),
  error: false,
};

/** The server runs but has not reported a backend state: it contacts the daemon at the first audit. */
export const RUNNING_VIEW: StatusView = {
  text: "$(shield) k3",
  tooltip: tooltip("The k3lsp language server is running; it contacts the audit backend at the first audit.", undefined),
  error: false,
};

/** The language server process is not running (failed to start, crashed, or stopped). */
export const STOPPED_VIEW: StatusView = {
  text: "$(error) k3: server stopped",
  tooltip: tooltip("The k3lsp language server is not running; see the k3lsp output channel.", undefined),
  error: true,
};

/** A `k3lsp/status` notification that failed `parseStatus`. */
export function invalidStatusView(error: Error): StatusView {
  return { text: "$(warning) k3: bad status", tooltip: tooltip(error.message, undefined), error: true };
}

/** One line for an information message from the `k3lsp.status` result; the full dict goes to a channel. */
export function summarizeStatus(result: unknown): string {
  if (typeof result !== "object" || result === null || Array.isArray(result)) {
    return `k3 backend status: ${JSON.stringify(result)}`;
  }
  const scalars = Object.entries(result)
    .filter(([, value]) => value === null || typeof value !== "object")
    .map(([key, value]) => `${key}: ${String(value)}`);
  const line = `k3 backend status: ${scalars.join(", ") || "(details in the output channel)"}`;
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}
