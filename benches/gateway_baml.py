#!/usr/bin/env python3
"""The gateway corpus through BAML's schema-aligned parser, for comparison
with Sluice's gateway and with json_repair + pydantic (gateway_python.py).

    pip install baml-py json_repair pydantic
    python3 benches/gateway_baml.py

The contract is `benches/baml_src/customer.baml`; its Python client is
generated into a temporary directory with `baml-cli generate` (nothing
generated is kept). `b.parse.ExtractCustomer(raw)` parses without calling a
model. Masking (the contract's rule) is applied after, as in
gateway_python.py, whose checks this script shares.
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from gateway_python import as_data, report  # noqa: E402


def client():
    out = pathlib.Path(tempfile.mkdtemp(prefix="sluice-baml-"))
    shutil.copytree(HERE / "baml_src", out / "baml_src")
    subprocess.run(["baml-cli", "generate", "--from", str(out / "baml_src")], check=True, capture_output=True)
    sys.path.insert(0, str(out / "baml_out"))
    from baml_client import b  # noqa: PLC0415 - generated just above

    return b


def main():
    b = client()
    report(lambda raw: as_data(b.parse.ExtractCustomer(raw)))


if __name__ == "__main__":
    main()
