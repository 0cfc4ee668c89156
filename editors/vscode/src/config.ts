/**
 * Settings -> how to start the server and what to tell it.
 *
 * Pure functions over a `get(key)` view of the `k3lsp` configuration section, so they can be
 * tested without VS Code. The server keys are the ones every editor sends (see the language
 * server's options): this file must not invent keys the server does not read.
 */
import * as os from "node:os";
import * as path from "node:path";

/** The part of `vscode.WorkspaceConfiguration` used here. */
export interface SettingsView {
  get<T>(key: string): T | undefined;
}

/** Keys of the `k3lsp` section that the server reads; `server.*` and `trace.*` stay in the editor. */
export const SERVER_KEYS = [
  "endpoint",
  "serverKey",
  "clientKey",
  "insecure",
  "trigger",
  "minSeverity",
  "maxFileBytes",
  "include",
  "exclude",
  "thinkingEffort",
] as const;

/** The command line of the language server; no arguments means LSP on stdio. */
export interface ServerCommand {
  command: string;
  args: string[];
}

/** `~/x` -> `/home/me/x`: settings are typed by hand and VS Code does not expand `~`. */
export function expandHome(p: string): string {
  if (p === "~") {
    return os.homedir();
  }
  if (p.startsWith("~/")) {
    return path.join(os.homedir(), p.slice(2));
  }
  return p;
}

function setting(settings: SettingsView, key: string): string {
  const value = settings.get<unknown>(key);
  return typeof value === "string" ? value.trim() : "";
}

/**
 * `k3lsp.server.python` wins over `k3lsp.server.path`: a virtualenv's interpreter is the
 * usual way to run a checkout, and `-m k3lsp` needs no console script on PATH. `-I` (isolated):
 * the server may start in the workspace, and a plain `-m` would import a `k3lsp/` directory of
 * the audited repository before the installed package.
 */
export function serverCommand(settings: SettingsView): ServerCommand {
  const python = setting(settings, "server.python");
  if (python) {
    return { command: expandHome(python), args: ["-I", "-m", "k3lsp"] };
  }
  return { command: expandHome(setting(settings, "server.path") || "k3lsp"), args: [] };
}

/** Setting ids the client keeps in sync with `workspace/didChangeConfiguration`. */
export const SYNCHRONIZED_SETTINGS: readonly string[] = SERVER_KEYS.map((key) => `k3lsp.${key}`);

function isUnset(value: unknown): boolean {
  return (
    value === undefined ||
    value === null ||
    (typeof value === "string" && value.trim() === "") ||
    (Array.isArray(value) && value.length === 0)
  );
}

/**
 * The server keys that are actually set, for initializationOptions and `workspace/configuration`.
 *
 * Empty strings, empty lists and null mean "the server's default" (e.g. endpoint from K3LSP_ENDPOINT),
 * and the server rejects `""` and `[]` as an endpoint, so they are left out. `server.*` and `trace.*` are dropped:
 * the server reports unknown keys as errors.
 */
export function serverSettings(settings: SettingsView): Record<string, unknown> {
  const options: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = settings.get<unknown>(key);
    if (!isUnset(value)) {
      options[key] = value;
    }
  }
  return options;
}

/** `serverSettings` for the plain JSON object the client answers `workspace/configuration` with. */
export function serverSection(section: unknown): unknown {
  if (typeof section !== "object" || section === null || Array.isArray(section)) {
    return section;
  }
  const values = section as Record<string, unknown>;
  return serverSettings({ get: <T>(key: string) => values[key] as T | undefined });
}
