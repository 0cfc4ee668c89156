-- Test config: the plugin from the work tree on the runtimepath, set up from K3_TEST_* variables
-- (set by tests/editors/test_nvim.py). Loaded with `nvim --headless --clean -u`, so nothing of the
-- machine's own Neovim config takes part.
vim.opt.rtp:prepend(vim.env.K3_TEST_PLUGIN)
vim.opt.swapfile = false
require('k3lsp').setup({
  python = vim.env.K3_TEST_PYTHON,
  endpoint = vim.env.K3_TEST_ENDPOINT,
  trigger = vim.env.K3_TEST_TRIGGER,
})
