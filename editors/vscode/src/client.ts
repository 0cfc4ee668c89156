/**
 * The LanguageClient for `k3lsp` over stdio, built from the current settings.
 *
 * A new client is built on every (re)start because vscode-languageclient keeps the server
 * command and initializationOptions it was constructed with; `client.restart()` would keep a
 * stale `k3lsp.server.path`.
 */
import type { LogOutputChannel } from "vscode";
import {
  DocumentSelector,
  ExecuteCommandOptions,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  RegistrationData,
  ServerOptions,
} from "vscode-languageclient/node";
import { SYNCHRONIZED_SETTINGS, SettingsView, serverCommand, serverSection, serverSettings } from "./config";

/** C sources, plus headers whatever language VS Code gives them (`.h` often opens as cpp). */
export const DOCUMENT_SELECTOR: DocumentSelector = [
  { scheme: "file", language: "c" },
  { scheme: "file", pattern: "**/*.h" },
];

/** Answers `workspace/configuration` for section "k3lsp" with the server's keys only (see serverSection). */
export const CONFIGURATION_MIDDLEWARE: Middleware = {
  workspace: {
    async configuration(params, token, next) {
      const result = await next(params, token);
      if (!Array.isArray(result)) {
        return result;
      }
      return result.map((value, index) => (params.items[index]?.section === "k3lsp" ? serverSection(value) : value));
    },
  },
};

export function createClient(settings: SettingsView, outputChannel: LogOutputChannel): LanguageClient {
  const { command, args } = serverCommand(settings);
  // No `transport`: TransportKind.stdio would append `--stdio`, while `k3lsp` with no arguments is stdio.
  const serverOptions: ServerOptions = { command, args };
  const clientOptions: LanguageClientOptions = {
    documentSelector: DOCUMENT_SELECTOR,
    initializationOptions: serverSettings(settings),
    // Individual keys rather than the "k3lsp" section: the client then sends only the server's keys
    // (as {k3lsp: {...}}), skipping empty ones, instead of `server.*`, `trace.*` and `endpoint: ""`.
    synchronize: { configurationSection: [...SYNCHRONIZED_SETTINGS] },
    middleware: CONFIGURATION_MIDDLEWARE,
    outputChannel,
  };
  return new LanguageClient("k3lsp", "k3lsp", serverOptions, clientOptions);
}

/**
 * Stop the client from registering VS Code commands the extension already registered.
 *
 * vscode-languageclient registers a VS Code command for every command the server advertises in
 * `executeCommandProvider`; for `k3lsp.auditFile` and `k3lsp.auditWorkspace` that id is already
 * taken by this extension (which adds the active document's uri), and the duplicate
 * registration throws and fails the client start. Other server commands (code-action commands
 * such as explain or suppress) must still be registered, so only `owned` ids are dropped.
 */
export function skipOwnedCommands(client: LanguageClient, owned: readonly string[]): void {
  const feature = client.getFeature(ExecuteCommandRequest.method);
  const register = feature.register.bind(feature);
  feature.register = (data: RegistrationData<ExecuteCommandOptions>) => {
    const commands = data.registerOptions.commands.filter((command) => !owned.includes(command));
    register({ ...data, registerOptions: { ...data.registerOptions, commands } });
  };
}
