"""Kubernetes resource quantities, exactly (Decimal), as apimachinery's resource.Quantity reads them."""

from __future__ import annotations

import re
from decimal import ROUND_UP, Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# ASCII digits only (re.ASCII): Python's \d would also take other scripts' digits, which
# apimachinery's parser refuses.
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$", re.ASCII)
# apimachinery caps a quantity at 2^63-1 in magnitude ("Numbers larger ... will be capped",
# k8s.io/apimachinery/pkg/api/resource/quantity.go); exponents beyond this only overflow.
_MAX = Decimal(2**63 - 1)
_MAX_EXPONENT = 40


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    m = _RE.match(value.strip())
    if not m:
        raise QuantityError(f"{value!r} is not a quantity")
    number, exponent, suffix = m.groups()
    try:
        base = Decimal(number)
        if exponent:
            # Clamped before use: 1e999999999 must not ask Decimal (or int()) for a billion digits.
            digits = exponent[1:].lstrip("+-")
            power = (int(digits) if len(digits) <= 6 else 10**6) * (-1 if exponent[1] == "-" else 1)
            result = base.scaleb(max(-_MAX_EXPONENT, min(power, _MAX_EXPONENT)))
        else:
            result = base * _SUFFIX[suffix or ""]
    except (InvalidOperation, ArithmeticError) as e:
        raise QuantityError(f"{value!r} is out of range") from e
    return result if abs(result) <= _MAX else _MAX.copy_sign(base)


def as_int64(value: object) -> int | None:
    """Go's Quantity.AsInt64: the exact integer value, or None when it is fractional or invalid."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19:
        return int(value)  # the common case, without the regex and Decimal
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    if q != q.to_integral_value():
        return None
    n = int(q)
    if not -(2**63) <= n < 2**63:
        return None
    return n


def value_ceil(value: object) -> int | None:
    """Go's Quantity.Value(): the value rounded up (away from zero) to an integer; None if invalid."""
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    return int(q.to_integral_value(rounding=ROUND_UP))
