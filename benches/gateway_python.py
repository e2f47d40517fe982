#!/usr/bin/env python3
"""The gateway corpus through Python's json_repair + pydantic, for comparison
with the Criterion benchmark (`cargo bench -p sluice-domain --bench gateway`).

    pip install json_repair pydantic
    python3 benches/gateway_python.py

Each case: json_repair.loads(raw) (it finds the object in prose and fences and
repairs it), then a pydantic v2 model of the same 10-field contract validates
it (lax mode: the library's own coercions). Masking and the safety scan that
Sluice also does are not part of this pipeline, so the comparison favours
Python. Prints, per case, whether it came out valid, then the throughput of
the whole corpus on one core.
"""

import datetime
import json
import pathlib
import time
from typing import Optional

import json_repair
import pydantic

CORPUS = json.loads((pathlib.Path(__file__).parent.parent / "crates/domain/benches/gateway_corpus.json").read_text())


class Address(pydantic.BaseModel):
    city: Optional[str] = None
    zip: str


class Customer(pydantic.BaseModel):
    user_id: int
    email: str
    full_name: str
    is_active: bool
    balance: Optional[float] = None
    signup_date: Optional[datetime.date] = None
    last_login: Optional[datetime.datetime] = None
    plan: Optional[str] = None
    notes: Optional[str] = None
    address: Optional[Address] = None


def run(raw):
    obj = json_repair.loads(raw)
    if isinstance(obj, list):  # an object wrapped in an array
        obj = next((o for o in obj if isinstance(o, dict)), None)
    return Customer.model_validate(obj)


def main():
    cases = [(c["name"], c["raw"]) for c in CORPUS["cases"]]
    valid = 0
    for name, raw in cases:
        try:
            c = run(raw)
            ok = c.user_id == 1042 and c.balance == 1234.5 and c.is_active is True
            detail = "" if ok else f"(wrong values: user_id={c.user_id}, balance={c.balance})"
        except Exception as e:  # noqa: BLE001 - a failed validation of any kind
            ok, detail = False, type(e).__name__ + ": " + str(e).splitlines()[0][:90]
        valid += ok
        print(f"  {name:<26} {'valid' if ok else 'FAILED'} {detail}")
    print(f"valid: {valid} of {len(cases)}")

    strict = sum(1 for _, raw in cases if isinstance(_strict(raw), dict))
    print(f"strict json.loads alone reads: {strict} of {len(cases)}")

    rounds = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 5.0:
        for _, raw in cases:
            try:
                run(raw)
            except Exception:  # noqa: BLE001 - failures cost time too
                pass
        rounds += 1
    elapsed = time.perf_counter() - start
    n = rounds * len(cases)
    print(f"corpus: {n} validations in {elapsed:.2f} s = {n / elapsed:,.0f}/s, {elapsed / n * 1e6:.1f} µs each")


def _strict(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return None


if __name__ == "__main__":
    main()
