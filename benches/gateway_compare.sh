#!/usr/bin/env bash
# The gateway corpus through Sluice's pipeline (Criterion, one thread) and,
# in the same run, through Python's json_repair + pydantic.
#
#   benches/gateway_compare.sh
#
# Needs: python3 with json_repair and pydantic (pip install json_repair pydantic).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import json_repair, pydantic' 2>/dev/null || { echo "pip install json_repair pydantic"; exit 1; }
echo "== Sluice (cargo bench -p sluice-domain --bench gateway)"
cargo bench -q -p sluice-domain --bench gateway 2>/dev/null | grep -E '^gateway/|time:|thrpt:'
echo "== Python $(python3 -c 'import sys; print(sys.version.split()[0])'), json_repair $(pip show json_repair 2>/dev/null | awk '/^Version/{print $2}'), pydantic $(python3 -c 'import pydantic; print(pydantic.VERSION)')"
python3 benches/gateway_python.py
