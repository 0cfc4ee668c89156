-- Scenario: an auditor opens a C file, saves it, reads the findings, hovers one, lists its code actions,
-- asks for the backend status, re-audits with :K3Audit, asks for an explanation, suppresses a finding in
-- the workspace baseline and applies the suggested fix.
-- Every wait is bounded; what happened is printed for tests/editors/test_nvim.py to check.
local report = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/report.lua')
local out, wait = report.out, report.wait

local notes = report.capture_notes()

local function noted(pattern)
  for _, msg in ipairs(notes) do
    if msg:find(pattern) then
      return msg
    end
  end
end

local function sorted_diagnostics(buf)
  local diags = vim.diagnostic.get(buf)
  table.sort(diags, function(a, b)
    return a.lnum < b.lnum
  end)
  return diags
end

local function print_diagnostics(buf)
  for _, d in ipairs(sorted_diagnostics(buf)) do
    out('DIAG', {
      line = d.lnum + 1,
      end_line = d.end_lnum + 1,
      code = d.code,
      source = d.source,
      severity = d.severity,
      namespace = vim.diagnostic.get_namespace(d.namespace).name,
      message = d.message,
    })
  end
end

local function code_actions(client, buf, d)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    range = { start = { line = d.lnum, character = d.col }, ['end'] = { line = d.end_lnum, character = d.end_col } },
    context = { diagnostics = { d.user_data.lsp }, triggerKind = 1 },
  }
  local response = client:request_sync('textDocument/codeAction', params, 30000, buf)
  return response and response.result or {}
end

--- Runs the command of the first action titled like `pattern` the way vim.lsp.buf.code_action() does;
--- returns the executeCommand response ({ err, result }) or nil when it did not come.
local function run_command(client, buf, actions, pattern)
  for _, action in ipairs(actions) do
    if action.title:find(pattern) then
      local command = type(action.command) == 'table' and action.command or action
      local response
      client:exec_cmd(command, { bufnr = buf }, function(err, result)
        response = { err = err or vim.NIL, result = result }
      end)
      wait(pattern, 120000, function()
        return response ~= nil
      end)
      return response
    end
  end
  out('MISSING', pattern)
end

local function messages_with(text)
  for _, line in ipairs(vim.split(vim.api.nvim_exec2('messages', { output = true }).output, '\n')) do
    if line:find(text, 1, true) then
      return line
    end
  end
end

--- Resolves the quick fix if the server sends edits lazily, then applies it as Neovim would.
local function apply_fix(client, buf, action)
  if not action.edit then
    local response = client:request_sync('codeAction/resolve', action, 30000, buf)
    action = response and response.result or action
  end
  if not action.edit then
    out('FIX', 'no edit')
    return
  end
  vim.lsp.util.apply_workspace_edit(action.edit, client.offset_encoding)
end

report.run(function()
  local buf = vim.api.nvim_get_current_buf()
  local expect = tonumber(vim.env.K3_TEST_EXPECT)
  local client
  if not wait('client', 60000, function()
    client = vim.lsp.get_clients({ name = 'k3lsp', bufnr = buf })[1]
    return client ~= nil and client.initialized
  end) then
    return
  end
  out('CLIENT', {
    root = client.root_dir,
    pull = client.server_capabilities.diagnosticProvider ~= nil,
    enabled = vim.lsp.is_enabled('k3lsp'),
  })

  vim.cmd('write')
  wait('diagnostics', 120000, function()
    return #vim.diagnostic.get(buf) >= expect
  end)
  vim.wait(2000) -- a second copy of each finding (push + pull) would have arrived by now
  print_diagnostics(buf)
  local first = sorted_diagnostics(buf)[1]
  if not first then
    return
  end

  local hover = client:request_sync('textDocument/hover', {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    position = { line = first.lnum, character = first.col },
  }, 30000, buf)
  out('HOVER', hover and hover.result and hover.result.contents)

  local actions = code_actions(client, buf, first)
  for _, action in ipairs(actions) do
    out('ACTION', { title = action.title, kind = action.kind })
  end

  vim.cmd('K3Status')
  wait('K3Status', 30000, function()
    return noted('backend status') ~= nil
  end)
  out('STATUS', noted('backend status'))
  out('STATUSLINE', require('k3lsp').statusline())

  vim.cmd('K3Audit')
  wait('K3Audit', 120000, function()
    return noted('^k3lsp: audited') ~= nil
  end)
  out('AUDITED', noted('^k3lsp: audited'))
  out('COUNT', #vim.diagnostic.get(buf))

  -- The explanation comes back as a window/showMessage, which Neovim echoes into :messages.
  local explained = run_command(client, buf, actions, '^Explain')
  out('EXPLAIN', { response = explained, message = messages_with('(' .. first.code .. ')') or vim.NIL })

  -- Suppressing the other finding in the baseline writes the file and takes its diagnostic away.
  local second = sorted_diagnostics(buf)[2]
  local baselined = run_command(client, buf, code_actions(client, buf, second), 'workspace baseline')
  wait('baseline', 30000, function()
    return #vim.diagnostic.get(buf) == expect - 1
  end)
  out('BASELINE', {
    response = baselined,
    left = vim.tbl_map(function(d)
      return d.code
    end, vim.diagnostic.get(buf)),
    file = vim.fn.filereadable(client.root_dir .. '/.k3audit-baseline.json') == 1,
  })

  for _, action in ipairs(actions) do
    if action.kind == 'quickfix' and action.title:lower():find('fix') then
      apply_fix(client, buf, action)
      out('FIXED', vim.api.nvim_buf_get_lines(buf, 0, -1, false))
      break
    end
  end
end)
