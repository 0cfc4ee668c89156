-- Test config: the plugin from the work tree on the runtimepath, set up from K3_TEST_* variables
-- (set by tests/editors/test_nvim.py). Loaded with `nvim --headless --clean -u`, so nothing of the
-- machine's own Neovim config takes part.
vim.opt.rtp:prepend(vim.env.K3_TEST_PLUGIN)
if vim.env.K3_TEST_LEGACY == '1' then
  -- The plugin's Neovim 0.10 branch (vim.lsp.start from a FileType autocmd), run on this 0.11.
  local has = vim.fn.has
  vim.fn.has = function(feature)
    return feature == 'nvim-0.11' and 0 or has(feature)
  end
end
vim.opt.swapfile = false
require('k3lsp').setup({
  python = vim.env.K3_TEST_PYTHON,
  endpoint = vim.env.K3_TEST_ENDPOINT,
  trigger = vim.env.K3_TEST_TRIGGER ~= '' and vim.env.K3_TEST_TRIGGER or nil,
  server_key = vim.env.K3_TEST_SERVER_KEY ~= '' and vim.env.K3_TEST_SERVER_KEY or nil,
  client_key = vim.env.K3_TEST_CLIENT_KEY ~= '' and vim.env.K3_TEST_CLIENT_KEY or nil,
})
