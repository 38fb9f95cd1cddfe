-- codeparrot language server for Neovim 0.7 and later.
--
-- Put this file in your config (e.g. ~/.config/nvim/lua/codeparrot.lua) and call
--   require("codeparrot").setup({ checkpoint = "/path/to/run" })
-- from init.lua, or source it directly with `:luafile lsp/editors/nvim.lua` after
-- setting vim.g.codeparrot_checkpoint.
--
-- What you get:
--   * Neovim 0.12+: ghost text (textDocument/inlineCompletion); <Tab> accepts.
--   * Every version: completion items (textDocument/completion) in the omnifunc
--     (<C-x><C-o>) and in completion plugins (nvim-cmp, blink.cmp) that read LSP.
--
-- Settings are sent as initializationOptions; change them later with
--   :lua vim.lsp.buf_notify(0, "workspace/didChangeConfiguration",
--       { settings = { codeparrot = { maxTokens = 16 } } })

local M = {}

local defaults = {
  -- the command that starts the server; `codeparrot` must be on PATH (or give the
  -- full path of the virtualenv's script, e.g. "~/codeparrot/.venv/bin/codeparrot")
  cmd = { "codeparrot", "lsp" },
  checkpoint = nil, -- directory written by `codeparrot train` (or set vim.g.codeparrot_checkpoint)
  filetypes = { "python" },
  settings = { maxTokens = 32, temperature = 0, debounceMs = 0 },
  inline = true, -- ghost text on Neovim 0.12+
}

local function options(opts)
  opts = vim.tbl_deep_extend("force", {}, defaults, opts or {})
  opts.checkpoint = opts.checkpoint or vim.g.codeparrot_checkpoint
  local init = vim.deepcopy(opts.settings)
  if opts.checkpoint then
    init.checkpoint = vim.fn.expand(opts.checkpoint)
  end
  return opts, { codeparrot = init }
end

-- Acceptance statistics: the server's items carry the command "codeparrot.accept"; Neovim
-- runs it when an item is accepted through vim.lsp.completion (0.11+) or ghost text is
-- accepted (0.12+), and this tells the server (codeparrot/acceptCompletion). Where no
-- command runs (the omnifunc), the server infers acceptance from the next edit.
local function register_accept_command()
  vim.lsp.commands["codeparrot.accept"] = function(command, ctx)
    local client = vim.lsp.get_client_by_id(ctx.client_id)
    if not client or not command.arguments then
      return
    end
    if vim.fn.has("nvim-0.11") == 1 then
      client:notify("codeparrot/acceptCompletion", command.arguments[1])
    else
      client.notify("codeparrot/acceptCompletion", command.arguments[1])
    end
  end
end

local function on_attach(client, bufnr, opts)
  register_accept_command()
  -- completion items through the omnifunc on every version (<C-x><C-o>)
  vim.api.nvim_buf_set_option(bufnr, "omnifunc", "v:lua.vim.lsp.omnifunc")
  -- 0.11+: Neovim's own completion inserts a plain-text item only up to its first space
  -- (0.11) or line break (0.12), so accepting `return os.path.join(*parts)` would leave
  -- `return`. Give our items their whole first line as the inserted word (other
  -- servers' items are left alone; the server labels its items "codeparrot").
  if vim.lsp.completion and vim.lsp.completion.enable then
    vim.lsp.completion.enable(true, client.id, bufnr, {
      convert = function(item)
        if item.detail ~= "codeparrot" or not item.textEdit then
          return {}
        end
        return { word = item.textEdit.newText:gsub("\r\n?", "\n"):match("^[^\n]*") }
      end,
    })
  end
  -- ghost text on 0.12+ (the server also advertises inlineCompletionProvider = {}:
  -- present but empty, so test for presence, not truthiness)
  if opts.inline and vim.lsp.inline_completion and client.server_capabilities.inlineCompletionProvider ~= nil then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
    vim.keymap.set("i", "<Tab>", function()
      if not vim.lsp.inline_completion.get() then
        return "<Tab>"
      end
    end, { buffer = bufnr, expr = true, desc = "accept codeparrot suggestion" })
  end
end

function M.setup(opts)
  local init_options
  opts, init_options = options(opts)

  -- Neovim 0.11+: vim.lsp.config + vim.lsp.enable
  if vim.lsp.config and vim.lsp.enable then
    vim.lsp.config("codeparrot", {
      cmd = opts.cmd,
      filetypes = opts.filetypes,
      root_markers = { ".git", "pyproject.toml", "setup.py" },
      init_options = init_options,
      on_attach = function(client, bufnr)
        on_attach(client, bufnr, opts)
      end,
    })
    vim.lsp.enable("codeparrot")
    return
  end

  -- Neovim 0.7 - 0.10: start (or reuse) one client per root and attach buffers to it
  local group = vim.api.nvim_create_augroup("codeparrot_lsp", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = opts.filetypes,
    callback = function(args)
      local config = {
        name = "codeparrot",
        cmd = opts.cmd,
        root_dir = vim.fn.getcwd(),
        init_options = init_options,
        on_attach = function(client, bufnr)
          on_attach(client, bufnr, opts)
        end,
      }
      if vim.lsp.start then -- 0.8+
        vim.lsp.start(config, { bufnr = args.buf })
      else -- 0.7
        M._client_id = M._client_id or vim.lsp.start_client(config)
        vim.lsp.buf_attach_client(args.buf, M._client_id)
      end
    end,
  })
end

-- `:luafile nvim.lua` with vim.g.codeparrot_checkpoint set: set up at once
if vim.g.codeparrot_checkpoint and not vim.g.codeparrot_no_autosetup then
  M.setup({ cmd = vim.g.codeparrot_cmd })
end

return M
