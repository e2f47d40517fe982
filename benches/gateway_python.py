#!/usr/bin/env python3
"""The gateway corpus through Python's json_repair + pydantic, for comparison
with the Criterion benchmark (`cargo bench -p sluice-domain --bench gateway`).

    pip install json_repair pydantic
    python3 benches/gateway_python.py

Each case: json_repair.loads(raw) (it finds the object in prose and fences and
repairs it), then a pydantic v2 model of the same 10-field contract validates
it (lax mode: the library's own coercions). Masking and the safety scan that
Sluice also does are not part of this pipeline, so the comparison favours
Python. Masking (the contract's rule, as a few lines of Python) is applied
after, so outputs compare with what the corpus expects. Prints, per case,
whether it came out correct, then the throughput of the whole corpus on one
core.
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


def mask(text):
    """The contract's mask: the first 3 characters of more than 6, the first
    1 of 3 to 6, none of fewer; an e-mail address masks its local part."""
    def keep(t):
        n = len(t)
        return t[:3] if n > 6 else t[:1] if n >= 3 else ""
    local, at, domain = text.partition("@")
    if at and local and "." in domain:
        return f"{keep(local)}****@{domain}"
    return f"{keep(text)}****"


def expected(case):
    """What the case must give: the corpus's defaults, minus what the case
    says is absent, plus what it expects besides."""
    absent = case.get("absent", [])
    under = lambda p: any(p == a or p.startswith(a + ".") for a in absent)  # noqa: E731
    want = {p: v for p, v in CORPUS["expect"].items() if not under(p)}
    want.update(case.get("expect", {}))
    return want, absent


def at(data, path):
    for part in path.split("."):
        if not isinstance(data, dict) or data.get(part) is None:
            return None
        data = data[part]
    return data


def correct(data, case):
    """Whether a pipeline's output (a dict, masking applied) is what the
    case expects; the first difference otherwise."""
    want, absent = expected(case)
    for path, value in want.items():
        got = at(data, path)
        if got != value or type(got) is bool and type(value) is not bool:
            return f"{path}={got!r}, not {value!r}"
    for path in absent:
        if at(data, path) is not None:
            return f"{path}={at(data, path)!r}, not absent"
    return None


def as_data(model):
    data = model.model_dump(mode="json")
    if isinstance(data.get("email"), str):
        data["email"] = mask(data["email"])
    return data


def report(parse):
    """Runs `parse` (raw text to the masked data) over the corpus: each
    case's verdict, the totals, then its throughput."""
    cases = CORPUS["cases"]
    valid = 0
    for case in cases:
        try:
            wrong = correct(parse(case["raw"]), case)
            ok, detail = wrong is None, "" if wrong is None else f"(wrong: {wrong})"
        except Exception as e:  # noqa: BLE001 - a failed validation of any kind
            ok, detail = False, type(e).__name__ + ": " + str(e).splitlines()[0][:90]
        valid += ok
        print(f"  {case['name']:<26} {'valid' if ok else 'FAILED'} {detail}")
    print(f"correct: {valid} of {len(cases)}")

    strict = sum(1 for c in cases if isinstance(_strict(c["raw"]), dict))
    print(f"strict json.loads alone reads: {strict} of {len(cases)}")

    throughput(parse)


def main():
    report(lambda raw: as_data(run(raw)))


def throughput(parse):
    """Every case of the corpus through `parse` for 5 s: validations per second."""
    cases = CORPUS["cases"]
    rounds = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 5.0:
        for case in cases:
            try:
                parse(case["raw"])
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
