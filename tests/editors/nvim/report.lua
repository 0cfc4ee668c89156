-- Shared by the scenarios: one JSON object per stdout line (`TAG {json}`), and a runner that always
-- quits, so that a Lua error is reported to the test instead of leaving headless Neovim waiting.
local M = {}

function M.out(tag, value)
  io.stdout:write(tag .. ' ' .. vim.json.encode(value == nil and vim.NIL or value) .. '\n')
  io.stdout:flush()
end

function M.run(scenario)
  local ok, err = xpcall(scenario, debug.traceback)
  if not ok then
    M.out('ERROR', err)
  end
  M.out('END', ok)
  vim.cmd('qa!')
end

--- Waits (bounded) for `cond`; reports which wait timed out instead of raising.
function M.wait(what, ms, cond)
  local ok = vim.wait(ms, cond, 50)
  if not ok then
    M.out('TIMEOUT', what)
  end
  return ok
end

--- Every vim.notify message from now on, in order (the plugin reports command outcomes through it).
function M.capture_notes()
  local notes = {}
  local notify = vim.notify
  vim.notify = function(msg, level, opts)
    table.insert(notes, msg)
    return notify(msg, level, opts)
  end
  return notes
end

return M
