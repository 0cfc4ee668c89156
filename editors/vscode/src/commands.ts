/**
 * The four palette commands. Three forward to the server through `workspace/executeCommand`;
 * restart rebuilds the client. Failures become messages, never unhandled rejections.
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient } from "vscode-languageclient/node";
import { auditOutcome } from "./results";
import { plainText, summarizeStatus } from "./status";

/** Extension command -> server command. */
export const SERVER_COMMANDS = {
  "k3lsp.auditFile": "k3lsp.auditFile",
  "k3lsp.auditWorkspace": "k3lsp.auditWorkspace",
  "k3lsp.showStatus": "k3lsp.status",
} as const;

export const RESTART_COMMAND = "k3lsp.restartServer";

/** Every command id this extension registers itself. */
export const EXTENSION_COMMANDS: readonly string[] = [...Object.keys(SERVER_COMMANDS), RESTART_COMMAND];

/** What the commands need from the extension: the current client and a way to rebuild it. */
export interface Session {
  readonly output: vscode.OutputChannel;
  client(): LanguageClient | undefined;
  restart(): Promise<void>;
}

/** Runs a server command, or explains why it cannot; resolves to undefined on failure. */
async function execute(session: Session, command: string, args: unknown[]): Promise<unknown> {
  const client = session.client();
  if (!client?.isRunning()) {
    const choice = await vscode.window.showErrorMessage(
      "k3lsp: the language server is not running (see the k3lsp output channel).",
      "Restart Server",
    );
    if (choice === "Restart Server") {
      await session.restart();
    }
    return undefined;
  }
  try {
    return await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    void vscode.window.showErrorMessage(plainText(`k3lsp: ${command} failed: ${message}`));
    return undefined;
  }
}

/** The explorer context menu passes the clicked file; the palette passes nothing. */
function targetUri(arg: unknown): vscode.Uri | undefined {
  if (arg instanceof vscode.Uri) {
    return arg;
  }
  return vscode.window.activeTextEditor?.document.uri;
}

const SUMMARY_MS = 8000;

/**
 * Runs an audit command and puts its outcome in the status bar (see results.ts). Errors go there
 * too, not into a notification: the server already shows one when the backend goes down or a file
 * is too large, and a second toast for the same cause is noise.
 */
async function audit(session: Session, command: string, args: unknown[]): Promise<void> {
  const { error, summary } = auditOutcome(await execute(session, command, args));
  if (error) {
    vscode.window.setStatusBarMessage(`$(warning) k3: ${error}`, SUMMARY_MS);
  } else if (summary) {
    vscode.window.setStatusBarMessage(summary, SUMMARY_MS);
  }
}

async function auditWorkspace(session: Session): Promise<void> {
  if (!vscode.workspace.workspaceFolders?.length) {
    void vscode.window.showWarningMessage("k3lsp: open a folder to audit a workspace.");
    return;
  }
  await audit(session, SERVER_COMMANDS["k3lsp.auditWorkspace"], []);
}

async function auditFile(session: Session, arg: unknown): Promise<void> {
  const uri = targetUri(arg);
  if (!uri || uri.scheme !== "file") {
    void vscode.window.showWarningMessage("k3lsp: open a C file (.c, .h) to audit it.");
    return;
  }
  await audit(session, SERVER_COMMANDS["k3lsp.auditFile"], [uri.toString()]);
}

async function showStatus(session: Session): Promise<void> {
  const result = await execute(session, SERVER_COMMANDS["k3lsp.showStatus"], []);
  if (result === undefined) {
    return;
  }
  session.output.appendLine(`k3 backend status:\n${JSON.stringify(result, null, 2)}`);
  const choice = await vscode.window.showInformationMessage(summarizeStatus(result), "Show Details");
  if (choice === "Show Details") {
    session.output.show(true);
  }
}

export function registerCommands(session: Session): vscode.Disposable[] {
  return [
    vscode.commands.registerCommand("k3lsp.auditFile", (arg: unknown) => auditFile(session, arg)),
    vscode.commands.registerCommand("k3lsp.auditWorkspace", () => auditWorkspace(session)),
    vscode.commands.registerCommand("k3lsp.showStatus", () => showStatus(session)),
    vscode.commands.registerCommand(RESTART_COMMAND, () => session.restart()),
  ];
}
