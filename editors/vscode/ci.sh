#!/usr/bin/env bash
# Builds and checks the VS Code extension from a clean checkout: install (lock file only),
# type-check, unit tests, bundle, package. Needs node >= 20 and the npm registry (or its cache).
set -euo pipefail
cd "$(dirname "$0")"

rm -rf out dist k3lsp.vsix
npm ci --no-audit --no-fund
npx tsc --noEmit -p .
npm test
npm run bundle
npm run package

test -s k3lsp.vsix || { echo "ci.sh: k3lsp.vsix was not produced" >&2; exit 1; }
# The package must hold the bundle and the manifest, and no node_modules or sources.
listing=$(python3 -c "import sys, zipfile; print(\"\\n\".join(zipfile.ZipFile(sys.argv[1]).namelist()))" k3lsp.vsix)
for required in extension/dist/extension.js extension/package.json extension/readme.md; do
  grep -qx "$required" <<<"$listing" || { echo "ci.sh: $required missing from the .vsix" >&2; exit 1; }
done
if grep -qE '^extension/(node_modules|src|test|out)/' <<<"$listing"; then
  echo "ci.sh: build inputs leaked into the .vsix:" >&2
  echo "$listing" >&2
  exit 1
fi
echo "ci.sh: ok, $(wc -c <k3lsp.vsix) bytes in k3lsp.vsix"
