-- Headless check of the Neovim set-up (any version from 0.7):
--   CODEPARROT_CHECKPOINT=runs/tiny CODEPARROT_CMD=.venv/bin/codeparrot \
--     nvim --headless -u NONE -c "luafile lsp/editors/nvim_check.lua"
-- Opens a Python buffer, waits for the server, asks for a completion at the end of a
-- line, edits the buffer and checks the server saw the edit. Prints PASS or FAIL lines
-- and exits with status 1 on a failure.
vim.cmd("filetype on")
local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
vim.g.codeparrot_checkpoint = os.getenv("CODEPARROT_CHECKPOINT")
vim.g.codeparrot_cmd = { os.getenv("CODEPARROT_CMD") or "codeparrot", "lsp" }
vim.cmd("luafile " .. here .. "nvim.lua")

local failed = false
local function check(ok, what)
  io.stdout:write((ok and "PASS " or "FAIL ") .. what .. "\n")
  failed = failed or not ok
end

local file = vim.fn.tempname() .. ".py"
vim.fn.writefile({ "import os", "", "def join_all(parts):", "    return os.path.join(" }, file)
vim.cmd("edit " .. file)
local clients = function() return vim.lsp.buf_get_clients(0) end
check(vim.wait(60000, function() return next(clients()) ~= nil end, 100), "server attached")
local _, client = next(clients())
if client then
  vim.wait(30000, function() return client.initialized end, 100)
  check(client.server_capabilities.inlineCompletionProvider ~= nil, "inlineCompletionProvider present")
  check(client.server_capabilities.completionProvider ~= nil, "completionProvider present")
  local params = { textDocument = { uri = vim.uri_from_bufnr(0) }, position = { line = 3, character = 24 } }
  local res = vim.lsp.buf_request_sync(0, "textDocument/completion", params, 120000) or {}
  local _, answer = next(res)
  check(answer ~= nil and answer.result ~= nil, "textDocument/completion answered")
  if answer and answer.result then
    for _, item in ipairs(answer.result.items) do
      local r = item.textEdit.range
      check(r["end"].line == 3 and r["end"].character == 24, "item's textEdit ends at the cursor: " .. vim.inspect(item.label))
    end
  end
  vim.api.nvim_buf_set_lines(0, 3, 4, false, { "    return os.path.join(parts" })
  local ctx = vim.lsp.buf_request_sync(0, "workspace/executeCommand", {
    command = "codeparrot.cursorContext",
    arguments = { vim.uri_from_bufnr(0), 3, 29 },
  }, 10000) or {}
  local _, c = next(ctx)
  check(c ~= nil and c.result ~= nil and c.result.lineHead == "    return os.path.join(parts",
    "the server saw the buffer edit (incremental sync, " .. client.offset_encoding .. ")")
end
io.stdout:write(string.format("nvim %d.%d.%d\n", vim.version().major, vim.version().minor, vim.version().patch))
vim.cmd(failed and "cquit 1" or "qa!")
