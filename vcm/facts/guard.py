"""The policy guard before every fact or state write (seed 002's memory guard): secrets and
credentials always, configurable PII classes, and text the poisoning filter flags are refused
unless an explicit justification is given (and recorded). Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Credentials: provider key shapes, private keys, bearer/JWT tokens, and "password: ..." style.
SECRETS: dict[str, re.Pattern[str]] = {
    "private_key": re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----"),
    "aws_access_key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "api_key": re.compile(r"\b(?:sk|pk|rk)[-_](?:live|test|proj)?[-_]?[A-Za-z0-9]{16,}\b"),
    "github_token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    "slack_token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    "vcm_token": re.compile(r"\bvcm_[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{20,}\b"),
    "password": re.compile(r"\b(?:password|passwd|passcode|pwd|secret|api[ _-]?key|token)\s*(?:is|=|:)\s*\S{4,}", re.I),
}

PII: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    "phone": re.compile(r"(?<!\w)\+?\d[\d ()-]{7,}\d\b"),
    "credit_card": re.compile(r"\b(?:\d[ -]?){13,19}\b"),
    "iban": re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b"),
    "ssn": re.compile(r"\b\d{3}-\d{2}-\d{4}\b"),
    "ip_address": re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"),
}


def _luhn(digits: str) -> bool:
    total, odd = 0, True
    for ch in reversed(digits):
        d = int(ch)
        if not odd:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
        odd = not odd
    return total % 10 == 0


@dataclass(frozen=True)
class GuardVerdict:
    reasons: tuple[str, ...]  # "secret:<name>", "pii:<class>", "poisoning:<pattern>"

    @property
    def refused(self) -> bool:
        return bool(self.reasons)


def check(text: str, pii: Sequence[str], poisoning: Sequence[str] = ()) -> GuardVerdict:
    """Why ``text`` may not be stored without a justification (nothing: it may)."""
    reasons = [f"secret:{name}" for name, rx in SECRETS.items() if rx.search(text)]
    for name in pii:
        rx = PII[name]
        for match in rx.finditer(text):
            if name == "credit_card" and not _luhn(re.sub(r"\D", "", match.group())):
                continue  # a long number is not a card number unless its check digit says so
            reasons.append(f"pii:{name}")
            break
    reasons += [f"poisoning:{name}" for name in poisoning]
    return GuardVerdict(tuple(dict.fromkeys(reasons)))
