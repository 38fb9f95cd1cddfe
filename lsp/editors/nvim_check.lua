-- Headless check of the Neovim set-up (any version from 0.7), driven by keystrokes:
--   CODEPARROT_CHECKPOINT=runs/tiny CODEPARROT_CMD=$PWD/.venv/bin/codeparrot \
--     nvim --headless -u NONE -c "luafile lsp/editors/nvim_check.lua"
--
-- Loads nvim.lua as a user would, opens a Python file ending in `    return`, then:
--   1. asks for textDocument/completion at the end of the last line and checks the item;
--   2. types `A<C-x><C-o><C-y><Esc>` (the omnifunc nvim.lua sets) and checks the line
--      became what the item's textEdit says;
--   3. on 0.12+, types `A`, waits for the ghost text (vim.lsp.inline_completion), presses
--      <Tab> (nvim.lua's mapping) and checks the line again;
--   4. edits the buffer and checks the server saw the edit (incremental sync).
-- CODEPARROT_EXPECT, when set, is the line every accepted suggestion must produce (the
-- tests use a checkpoint that learnt one snippet). Prints PASS / FAIL lines and the
-- version, and exits with status 1 on a failure. A checkpoint with random weights may
-- have no suggestion to give: steps 2 and 3 then FAIL with "no suggestion".
vim.cmd("filetype on")
local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
vim.g.codeparrot_checkpoint = os.getenv("CODEPARROT_CHECKPOINT")
vim.g.codeparrot_cmd = { os.getenv("CODEPARROT_CMD") or "codeparrot", "lsp" }
vim.cmd("luafile " .. here .. "nvim.lua")

local expect = os.getenv("CODEPARROT_EXPECT")
local failed = false
local function check(ok, what)
  io.stdout:write((ok and "PASS " or "FAIL ") .. what .. "\n")
  failed = failed or not ok
end
local function finish()
  local v = vim.version()
  io.stdout:write(string.format("nvim %d.%d.%d\n", v.major, v.minor, v.patch))
  vim.cmd(failed and "cquit 1" or "qa!")
end

local HEAD = "    return"
local file = vim.fn.tempname() .. ".py"
vim.fn.writefile({ "import os", "", "", "def join_all(parts):", HEAD }, file)
vim.cmd("edit " .. file)
local last = 4 -- 0-based line of HEAD

local function clients()
  if vim.lsp.get_clients then -- 0.10+
    return vim.lsp.get_clients({ bufnr = 0 })
  end
  return vim.tbl_values(vim.lsp.buf_get_clients(0))
end
local function line()
  return vim.api.nvim_buf_get_lines(0, last, last + 1, false)[1]
end
local function reset_line()
  vim.api.nvim_buf_set_lines(0, last, last + 1, false, { HEAD })
end

-- Run `steps` one after another, each a function that returns (when it is done) or a
-- predicate to wait for; keys typed with nvim_input are processed by the main loop in
-- between, as for a user.
local function run(steps)
  local i, started = 0, 0
  local function tick()
    if i > 0 and steps[i].wait then
      if not steps[i].wait() then
        if vim.loop.now() - started > (steps[i].timeout or 60000) then
          check(false, steps[i].what .. " (timed out)")
          return finish()
        end
        return vim.defer_fn(tick, 50)
      end
    end
    i = i + 1
    if i > #steps then
      return finish()
    end
    started = vim.loop.now()
    steps[i].run()
    vim.defer_fn(tick, 50)
  end
  vim.defer_fn(tick, 0)
end

check(vim.wait(60000, function() return #clients() > 0 end, 100), "server attached")
local client = clients()[1]
if not client then
  return finish()
end
vim.wait(30000, function() return client.initialized ~= false end, 100)
check(client.server_capabilities.inlineCompletionProvider ~= nil, "inlineCompletionProvider present")
check(client.server_capabilities.completionProvider ~= nil, "completionProvider present")

-- 1. the request an LSP completion plugin makes
local params = { textDocument = { uri = vim.uri_from_bufnr(0) }, position = { line = last, character = #HEAD } }
local res = vim.lsp.buf_request_sync(0, "textDocument/completion", params, 120000) or {}
local _, answer = next(res)
check(answer ~= nil and answer.result ~= nil, "textDocument/completion answered")
local item = answer and answer.result and answer.result.items[1]
local want -- the line once the item is accepted
if item then
  local r = item.textEdit.range
  check(r["end"].line == last and r["end"].character == #HEAD, "item's textEdit ends at the cursor: " .. vim.inspect(item.label))
  want = HEAD:sub(1, r.start.character) .. item.textEdit.newText
  if expect then
    check(want == expect, "the item completes the line to " .. vim.inspect(expect))
  end
else
  check(false, "no suggestion from textDocument/completion")
end

local ns = vim.api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
local function ghost()
  local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
  local m = marks[1]
  return m and m[4].virt_text and m[4].virt_text[1][1]
end

local steps = {
  -- 2. completion items through the omnifunc: <C-x><C-o>, <C-y> accepts
  {
    what = "completion menu after <C-x><C-o>",
    run = function()
      vim.api.nvim_win_set_cursor(0, { last + 1, 0 })
      vim.api.nvim_input("A<C-x><C-o>")
    end,
    wait = function()
      return vim.fn.pumvisible() == 1 or #vim.fn.complete_info({ "items" }).items > 0
    end,
  },
  {
    what = "back in normal mode after <C-y><Esc>",
    run = function()
      vim.api.nvim_input("<C-y><Esc>")
    end,
    wait = function()
      return vim.api.nvim_get_mode().mode == "n"
    end,
    timeout = 5000,
  },
  {
    run = function()
      check(want ~= nil and line() == want, "<C-x><C-o> <C-y> inserted the item: " .. vim.inspect(line()))
      reset_line()
    end,
  },
}

-- 3. ghost text on 0.12+: wait for it in insert mode, <Tab> accepts
if vim.lsp.inline_completion then
  local shown
  vim.list_extend(steps, {
    {
      what = "ghost text shown in insert mode",
      run = function()
        vim.api.nvim_win_set_cursor(0, { last + 1, 0 })
        vim.api.nvim_input("A")
      end,
      wait = function()
        shown = ghost()
        return shown ~= nil
      end,
    },
    {
      what = "back in normal mode after <Tab><Esc>",
      run = function()
        check(want == nil or HEAD .. shown == want, "ghost text " .. vim.inspect(shown) .. " matches the completion item")
        vim.api.nvim_input("<Tab>")
        vim.defer_fn(function() vim.api.nvim_input("<Esc>") end, 200)
      end,
      wait = function()
        return vim.api.nvim_get_mode().mode == "n"
      end,
      timeout = 5000,
    },
    {
      run = function()
        check(line() == (expect or HEAD .. shown), "<Tab> accepted the ghost text: " .. vim.inspect(line()))
        reset_line()
      end,
    },
  })
end

-- 4. an edit reaches the server
table.insert(steps, {
  run = function()
    vim.api.nvim_buf_set_lines(0, last, last + 1, false, { "    return parts" })
    local ctx = vim.lsp.buf_request_sync(0, "workspace/executeCommand", {
      command = "codeparrot.cursorContext",
      arguments = { vim.uri_from_bufnr(0), last, 16 },
    }, 10000) or {}
    local _, c = next(ctx)
    check(c ~= nil and c.result ~= nil and c.result.lineHead == "    return parts",
      "the server saw the buffer edit (incremental sync, " .. client.offset_encoding .. ")")
  end,
})

run(steps)
