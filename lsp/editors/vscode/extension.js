// A minimal VS Code client for `codeparrot lsp`: completion items from the language
// client, and ghost text through VS Code's inline completion API, backed by the
// server's textDocument/inlineCompletion (sent as a plain request, so it works with
// vscode-languageclient 9, which predates LSP 3.18).
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function settings() {
  const c = vscode.workspace.getConfiguration("codeparrot");
  const out = {
    maxTokens: c.get("maxTokens"),
    temperature: c.get("temperature"),
    debounceMs: c.get("debounceMs"),
  };
  if (c.get("checkpoint")) out.checkpoint = c.get("checkpoint");
  return { codeparrot: out };
}

async function activate(context) {
  const command = vscode.workspace.getConfiguration("codeparrot").get("command");
  client = new LanguageClient(
    "codeparrot",
    "codeparrot",
    { command, args: ["lsp"] },
    {
      documentSelector: [{ language: "python" }],
      initializationOptions: settings(),
    }
  );
  await client.start();

  context.subscriptions.push(
    vscode.languages.registerInlineCompletionItemProvider(
      { language: "python" },
      {
        async provideInlineCompletionItems(document, position, _context, token) {
          const result = await client.sendRequest(
            "textDocument/inlineCompletion",
            {
              textDocument: { uri: document.uri.toString() },
              position: client.code2ProtocolConverter.asPosition(position),
              context: { triggerKind: 1 },
            },
            token
          );
          const items = (result && (result.items || result)) || [];
          return items.map((item) => {
            const ghost = new vscode.InlineCompletionItem(
              item.insertText,
              new vscode.Range(position, position)
            );
            // run on acceptance: tells the server (acceptance statistics)
            if (item.command) ghost.command = item.command;
            return ghost;
          });
        },
      }
    ),
    // the command the server's items carry (ghost text and completion items): report the
    // accepted suggestion, as llm-ls's llm-ls/acceptCompletion does
    vscode.commands.registerCommand("codeparrot.accept", (verdict) =>
      client.sendNotification("codeparrot/acceptCompletion", verdict)
    ),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("codeparrot")) {
        client.sendNotification("workspace/didChangeConfiguration", { settings: settings() });
      }
    })
  );
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
