-- Test config without setup{}: only the plugin directory on 'runtimepath', as Neovim 0.11 users of
-- `lsp/k3lsp.lua` have it. The server command and endpoint come through vim.lsp.config, as a user's would.
vim.opt.rtp:prepend(vim.env.K3_TEST_PLUGIN)
vim.opt.swapfile = false
vim.lsp.config('k3lsp', {
  cmd = { vim.env.K3_TEST_PYTHON, '-m', 'k3lsp.cli' },
  init_options = { endpoint = vim.env.K3_TEST_ENDPOINT }, -- the server reads the endpoint from init_options only
})
vim.lsp.enable('k3lsp')
