--- The k3lsp language server, the Neovim 0.11 way: with this directory on 'runtimepath',
---
---   vim.lsp.config('k3lsp', { init_options = { endpoint = 'ipc:///run/user/1000/k3lsp/daemon.sock' } })  -- optional
---   vim.lsp.enable('k3lsp')
---
--- starts `k3lsp` (from PATH) for C buffers and `*.h` headers. The endpoint, the keys and `insecure` go in
--- `init_options` (the server reads them nowhere else); the other keys may go in `settings` too. `vim.lsp.config('k3lsp', {...})` overrides
--- any field (cmd, settings, init_options, ...); `require('k3lsp').setup{}` is the option-checking way to
--- the same config. See `:help k3lsp`.
local k3lsp = require('k3lsp')
k3lsp.create_commands()
return k3lsp.lsp_config(vim.deepcopy(k3lsp.defaults))
