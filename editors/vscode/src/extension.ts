/**
 * Activation: one status bar item, one output channel, the four commands, and a client session
 * that (re)builds the LanguageClient from the current settings.
 */
import * as vscode from "vscode";
import { LanguageClient, State } from "vscode-languageclient/node";
import { createClient, skipOwnedCommands } from "./client";
import { EXTENSION_COMMANDS, Session, registerCommands } from "./commands";
import { serverCommand } from "./config";
import {
  RUNNING_VIEW,
  STARTING_VIEW,
  STATUS_NOTIFICATION,
  STOPPED_VIEW,
  StatusView,
  invalidStatusView,
  parseStatus,
  statusView,
} from "./status";

/** Maps a `k3lsp/status` notification to a view; a malformed one is shown, not thrown. */
function backendView(params: unknown): StatusView {
  try {
    return statusView(parseStatus(params));
  } catch (error) {
    return invalidStatusView(error instanceof Error ? error : new Error(String(error)));
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

class ClientSession implements Session {
  private current: LanguageClient | undefined;
  private pending: Promise<void> = Promise.resolve();

  constructor(
    readonly output: vscode.LogOutputChannel,
    private readonly item: vscode.StatusBarItem,
  ) {}

  client(): LanguageClient | undefined {
    return this.current;
  }

  /** Serialised, so two quick restarts (command + settings change) cannot leave two servers running. */
  restart(): Promise<void> {
    this.pending = this.pending.catch(() => undefined).then(async () => {
      await this.stop();
      await this.start();
    });
    return this.pending;
  }

  async stop(): Promise<void> {
    const client = this.current;
    this.current = undefined;
    if (!client) {
      return;
    }
    try {
      await client.dispose();
    } catch (error) {
      // A client that never got running (e.g. executable not found) refuses to stop; nothing to do.
      this.output.appendLine(`k3lsp: stopping the language server: ${errorMessage(error)}`);
    }
  }

  private async start(): Promise<void> {
    const settings = vscode.workspace.getConfiguration("k3lsp");
    const client = createClient(settings, this.output);
    skipOwnedCommands(client, EXTENSION_COMMANDS);
    let reported = false; // a backend state from this client wins over "running"
    client.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
      reported = true;
      this.show(backendView(params));
    });
    client.onDidChangeState(({ newState }) => {
      if (newState === State.Stopped) {
        this.show(STOPPED_VIEW);
      } else if (newState === State.Starting) {
        reported = false; // the client restarts a crashed server itself: its old state is gone
        this.show(STARTING_VIEW);
      } else if (newState === State.Running && !reported) {
        this.show(RUNNING_VIEW);
      }
    });
    this.current = client;
    this.show(STARTING_VIEW);
    try {
      await client.start();
    } catch (error) {
      this.show(STOPPED_VIEW);
      const { command } = serverCommand(settings);
      const text = `k3lsp: could not start the language server "${command}": ${errorMessage(error)}`;
      void vscode.window.showErrorMessage(text, "Open Settings").then((choice) => {
        if (choice === "Open Settings") {
          void vscode.commands.executeCommand("workbench.action.openSettings", "k3lsp.server");
        }
      });
    }
  }

  private show(view: StatusView): void {
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }
}

let session: ClientSession | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("k3lsp", { log: true });
  const item = vscode.window.createStatusBarItem("k3lsp.status", vscode.StatusBarAlignment.Left, 0);
  item.name = "k3lsp backend";
  item.command = "k3lsp.showStatus";
  item.show();
  const current = new ClientSession(output, item);
  session = current;
  context.subscriptions.push(
    output,
    item,
    ...registerCommands(current),
    vscode.workspace.onDidChangeConfiguration((event) => {
      // The server command is fixed per client; the server's own keys reach it via synchronize.
      if (event.affectsConfiguration("k3lsp.server")) {
        void current.restart();
      }
    }),
  );
  await current.restart();
}

export async function deactivate(): Promise<void> {
  const current = session;
  session = undefined;
  await current?.stop();
}
