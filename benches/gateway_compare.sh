#!/usr/bin/env bash
# The gateway corpus through Sluice's pipeline (Criterion, one thread) and,
# in the same run, through Python's json_repair + pydantic and BAML's
# schema-aligned parser (offline, no model call).
#
#   benches/gateway_compare.sh
#
# Needs: python3 with json_repair, pydantic and baml-py
# (pip install json_repair pydantic baml-py; baml-py brings baml-cli).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import json_repair, pydantic, baml_py' 2>/dev/null || { echo "pip install json_repair pydantic baml-py"; exit 1; }
echo "== Sluice (cargo bench -p sluice-domain --bench gateway -- 'gateway/')"
cargo bench -q -p sluice-domain --bench gateway -- 'gateway/' 2>/dev/null | grep -E '^gateway/|time:|thrpt:'
echo "== Python $(python3 -c 'import sys; print(sys.version.split()[0])'), json_repair $(pip show json_repair 2>/dev/null | awk '/^Version/{print $2}'), pydantic $(python3 -c 'import pydantic; print(pydantic.VERSION)')"
python3 benches/gateway_python.py
echo "== BAML $(pip show baml-py 2>/dev/null | awk '/^Version/{print $2}') (b.parse, schema-aligned parsing)"
python3 benches/gateway_baml.py
