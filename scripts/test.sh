#!/usr/bin/env bash
# The test command: fetches the real test models if they are absent (quick when present), then
# runs every test of the workspace.
#
#   scripts/test.sh [cargo test args...]     e.g. scripts/test.sh -p vllm-rs-models
#
# Models go to $VLLM_RS_TEST_MODELS (default <repo>/.models); see scripts/fetch_test_models.sh.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export VLLM_RS_TEST_MODELS=${VLLM_RS_TEST_MODELS:-$REPO/.models}
bash "$REPO/scripts/fetch_test_models.sh" "$VLLM_RS_TEST_MODELS"
cd "$REPO"
if [ $# -eq 0 ]; then
  set -- --workspace
fi
exec cargo test "$@"
