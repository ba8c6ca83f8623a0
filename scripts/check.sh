#!/usr/bin/env bash
# The whole quality gate: lint, format, types, import contracts, tests.
# Called by the README's test command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== ruff"; python3 -m ruff check .
echo "== ruff format"; python3 -m ruff format --check .
echo "== mypy --strict"; python3 -m mypy
echo "== import contracts"; lint-imports
echo "== pytest"
set +e
# Two workers: most tests wait on real servers (brokers, PostgreSQL, S3, Spark), so two
# share the 2-core machine well. KIP714_TEST_WORKERS=0 runs in one process.
python3 -m pytest -n "${KIP714_TEST_WORKERS:-2}" --dist loadgroup "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
